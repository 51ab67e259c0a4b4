// A kafkajs producer sending one record per send() without waiting for answers, as a
// producer at linger 0 does (tests/kafka/test_produce_groups.py).
// Usage: node groups.js BOOTSTRAP TOPIC PARTITIONS COUNT IDEMPOTENT(0|1) [REFUSED_TOPIC]
// Record i ('v<i>') goes to partition i % PARTITIONS of TOPIC; every seventh send also goes to
// REFUSED_TOPIC's partition 0. Prints one JSON line: the values delivered to TOPIC, and the error
// types of the sends to REFUSED_TOPIC.
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, partitions, count, idempotent, refusedTopic] = process.argv.slice(2)
const kafka = new Kafka({
  clientId: 'groups', brokers: [bootstrap], logLevel: logLevel.NOTHING, retry: { retries: 2, initialRetryTime: 100 }
})
const producer = kafka.producer(idempotent === '1' ? { idempotent: true, maxInFlightRequests: 1 } : {})

async function main () {
  await producer.connect()
  const delivered = []
  const refused = []
  const sends = []
  for (let i = 0; i < Number(count); i++) {
    const value = `v${i}`
    sends.push(producer.send({ topic, acks: -1, messages: [{ value, partition: i % Number(partitions) }] })
      .then(() => delivered.push(value)))
    if (refusedTopic && i % 7 === 3) {
      sends.push(producer.send({ topic: refusedTopic, acks: -1, messages: [{ value, partition: 0 }] })
        .then(() => refused.push('none'), error => refused.push((error.originalError || error).type || error.name)))
    }
  }
  await Promise.all(sends)
  await producer.disconnect()
  return { delivered, refused }
}

main().then(answer => console.log(JSON.stringify(answer)), error => {
  console.log(JSON.stringify({ error: String(error) }))
  process.exit(1)
})
