// A kafkajs read_committed consumer (tests/kafka/test_kafka_transactions.py).
// Usage: node read_committed.js BOOTSTRAP TOPIC COUNT TIMEOUT_MS. Reads partition 0 from the
// start in a group of its own until COUNT values came (then half a second more, to catch
// extras) or TIMEOUT_MS passed; prints one JSON line: {"values": [...]} (utf-8 strings).
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, count, timeout] = process.argv.slice(2)
const kafka = new Kafka({ clientId: 'read-committed', brokers: [bootstrap], logLevel: logLevel.NOTHING })
const consumer = kafka.consumer({ groupId: `read-committed-${Date.now()}-${Math.random()}`, readUncommitted: false })

async function main () {
  const values = []
  let done
  const finished = new Promise(resolve => { done = resolve })
  const deadline = setTimeout(done, Number(timeout))
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ message }) => {
      values.push(message.value.toString())
      if (values.length === Number(count)) setTimeout(done, 500)
    }
  })
  await finished
  clearTimeout(deadline)
  await consumer.disconnect()
  return { values }
}

main().then(answer => console.log(JSON.stringify(answer)), error => {
  console.log(JSON.stringify({ unexpected: String(error) }))
  process.exit(1)
})
