// A kafkajs group consumer that starts before its producer, on one topic (tests/kafka/test_empty_topic_race.py).
// Usage: node race.js BOOTSTRAP TOPIC GROUP COUNT DELAY_MS TIMEOUT_MS
// The consumer subscribes from the beginning; DELAY_MS after it starts, a producer sends COUNT keyed
// records in small sends. Prints one JSON line: how many distinct records the consumer received.
const { Kafka, logLevel } = require('kafkajs')
const { startConsuming } = require('./consume')

const [bootstrap, topic, group, count, delayMs, timeoutMs] = process.argv.slice(2)
const total = Number(count)
const kafka = new Kafka({ clientId: 'race', brokers: [bootstrap], logLevel: logLevel.NOTHING })
const consumer = kafka.consumer({ groupId: group, maxWaitTimeInMs: 200 })
const producer = kafka.producer()
const received = new Set()

async function produce () {
  await new Promise(resolve => setTimeout(resolve, Number(delayMs)))
  await producer.connect()
  for (let i = 0; i < total; i += 10) {
    const messages = []
    for (let j = i; j < Math.min(i + 10, total); j++) messages.push({ key: `k${j}`, value: `v${j}` })
    await producer.send({ topic, messages })
  }
}

async function main () {
  const { finished } = await startConsuming(consumer, topic, value => received.add(value).size >= total, timeoutMs)
  const producing = produce()
  await finished
  await producing.catch(() => {})
  await Promise.all([consumer.disconnect(), producer.disconnect()])
  console.log(JSON.stringify({ received: received.size }))
}

main().catch(error => {
  console.log(JSON.stringify({ error: String(error) }))
  process.exit(1)
})
