// What Pulsar's Java client (MessageCryptoBc) does to a message's payload and data key, with
// the same BouncyCastle ciphers, driven line by line from a test: one command a line on
// stdin, one answer a line on stdout (hex), so a single JVM serves a whole test.
//
//   encrypt RSA|EC <public key, X.509 DER base64> <payload hex>
//       -> <wrapped data key hex> <iv hex> <ciphertext hex>   (a fresh AES-256 data key)
//   decrypt RSA|EC <private key, PKCS#8 DER base64> <wrapped hex> <iv hex> <ciphertext hex>
//       -> <payload hex>, or ERROR <reason>
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.security.Key;
import java.security.KeyFactory;
import java.security.SecureRandom;
import java.security.Security;
import java.security.spec.PKCS8EncodedKeySpec;
import java.security.spec.X509EncodedKeySpec;
import java.util.Base64;
import java.util.HexFormat;
import javax.crypto.Cipher;
import javax.crypto.KeyGenerator;
import javax.crypto.SecretKey;
import javax.crypto.spec.GCMParameterSpec;
import javax.crypto.spec.SecretKeySpec;
import org.bouncycastle.jce.provider.BouncyCastleProvider;

public class BcCryptoPeer {
    static final HexFormat HEX = HexFormat.of();
    static final SecureRandom RANDOM = new SecureRandom();

    static Cipher keyCipher(String kind) throws Exception {
        // MessageCryptoBc's two choices, by the key's algorithm
        return Cipher.getInstance(kind.equals("RSA") ? "RSA/NONE/OAEPWithSHA1AndMGF1Padding" : "ECIES", "BC");
    }

    static KeyFactory keys(String kind) throws Exception {
        return KeyFactory.getInstance(kind.equals("RSA") ? "RSA" : "ECDSA", "BC");
    }

    static String encrypt(String kind, String publicKey, byte[] payload) throws Exception {
        Key key = keys(kind).generatePublic(new X509EncodedKeySpec(Base64.getDecoder().decode(publicKey)));
        KeyGenerator generator = KeyGenerator.getInstance("AES");
        generator.init(256, RANDOM);
        SecretKey dataKey = generator.generateKey();
        Cipher wrap = keyCipher(kind);
        wrap.init(Cipher.ENCRYPT_MODE, key);
        byte[] wrapped = wrap.doFinal(dataKey.getEncoded());
        byte[] iv = new byte[12];
        RANDOM.nextBytes(iv);
        Cipher aes = Cipher.getInstance("AES/GCM/NoPadding", "BC");
        aes.init(Cipher.ENCRYPT_MODE, dataKey, new GCMParameterSpec(128, iv));
        return HEX.formatHex(wrapped) + " " + HEX.formatHex(iv) + " " + HEX.formatHex(aes.doFinal(payload));
    }

    static String decrypt(String kind, String privateKey, byte[] wrapped, byte[] iv, byte[] ciphertext)
            throws Exception {
        Key key = keys(kind).generatePrivate(new PKCS8EncodedKeySpec(Base64.getDecoder().decode(privateKey)));
        Cipher unwrap = keyCipher(kind);
        unwrap.init(Cipher.DECRYPT_MODE, key);
        SecretKey dataKey = new SecretKeySpec(unwrap.doFinal(wrapped), "AES");
        Cipher aes = Cipher.getInstance("AES/GCM/NoPadding", "BC");
        aes.init(Cipher.DECRYPT_MODE, dataKey, new GCMParameterSpec(128, iv));
        return HEX.formatHex(aes.doFinal(ciphertext));
    }

    public static void main(String[] args) throws Exception {
        Security.addProvider(new BouncyCastleProvider());
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            String answer;
            try {
                if (w[0].equals("encrypt")) {
                    answer = encrypt(w[1], w[2], HEX.parseHex(w[3]));
                } else if (w[0].equals("decrypt")) {
                    answer = decrypt(w[1], w[2], HEX.parseHex(w[3]), HEX.parseHex(w[4]), HEX.parseHex(w[5]));
                } else {
                    answer = "ERROR unknown command " + w[0];
                }
            } catch (Exception e) {
                answer = "ERROR " + e.getClass().getSimpleName() + ": " + e.getMessage();
            }
            System.out.println(answer.replace('\n', ' '));
            System.out.flush();
        }
    }
}
