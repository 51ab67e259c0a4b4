// A kafkajs transactional producer (tests/kafka/test_transactions.py, test_kafka_transactions.py).
// Usage: node transaction.js BOOTSTRAP TOPIC [TRANSACTIONAL_ID]. Commits a transaction of two
// records ('commit-1', 'commit-2') and aborts one ('abort-1'); prints one JSON line:
// {"committed": true, "aborted": true}, or the error that ended it (a broker without transactions).
const { Kafka, logLevel } = require('kafkajs')

const kafka = new Kafka({
  clientId: 'transactional', brokers: [process.argv[2]], logLevel: logLevel.NOTHING, retry: { retries: 2, initialRetryTime: 100 }
})
const producer = kafka.producer({
  transactionalId: process.argv[4] || 'kafkajs-transaction', maxInFlightRequests: 1, idempotent: true
})

async function main () {
  await producer.connect()
  try {
    const topic = process.argv[3]
    const committed = await producer.transaction()
    await committed.send({ topic, messages: [{ value: 'commit-1' }, { value: 'commit-2' }] })
    await committed.commit()
    const aborted = await producer.transaction()
    await aborted.send({ topic, messages: [{ value: 'abort-1' }] })
    await aborted.abort()
    return { committed: true, aborted: true }
  } catch (error) {
    const cause = error.originalError || error
    return { error: error.name, type: cause.type || null, message: String(error.message) }
  } finally {
    await producer.disconnect()
  }
}

main().then(answer => console.log(JSON.stringify(answer)), error => {
  console.log(JSON.stringify({ unexpected: String(error) }))
  process.exit(1)
})
