// A kafkajs read_committed consumer (tests/kafka/test_kafka_read_committed_clients.py).
// Usage: node read_committed.js BOOTSTRAP TOPIC COUNT TIMEOUT_MS. Reads partition 0 from the
// start in a group of its own until COUNT values came (then half a second more, to catch
// extras) or TIMEOUT_MS passed; prints one JSON line: {"values": [...]} (utf-8 strings).
const { Kafka, logLevel } = require('kafkajs')
const { startConsuming } = require('./consume')

const [bootstrap, topic, count, timeout] = process.argv.slice(2)
const kafka = new Kafka({ clientId: 'read-committed', brokers: [bootstrap], logLevel: logLevel.NOTHING })
const consumer = kafka.consumer({ groupId: `read-committed-${Date.now()}-${Math.random()}`, readUncommitted: false })

async function main () {
  const values = []
  const { finished } = await startConsuming(consumer, topic, value => values.push(value) >= Number(count), timeout)
  await finished
  await new Promise(resolve => setTimeout(resolve, 500))
  await consumer.disconnect()
  return { values }
}

main().then(answer => console.log(JSON.stringify(answer)), error => {
  console.log(JSON.stringify({ unexpected: String(error) }))
  process.exit(1)
})
