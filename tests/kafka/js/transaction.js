// A kafkajs transactional producer against a broker without transactions (tests/kafka/test_transactions.py).
// Usage: node transaction.js BOOTSTRAP TOPIC. Prints one JSON line: the error that ended the transaction's start.
const { Kafka, logLevel } = require('kafkajs')

const kafka = new Kafka({
  clientId: 'transactional', brokers: [process.argv[2]], logLevel: logLevel.NOTHING, retry: { retries: 2, initialRetryTime: 100 }
})
const producer = kafka.producer({ transactionalId: 'kafkajs-transaction', maxInFlightRequests: 1, idempotent: true })

async function main () {
  await producer.connect()
  try {
    const transaction = await producer.transaction()
    await transaction.send({ topic: process.argv[3], messages: [{ value: 'never' }] })
    await transaction.commit()
    return { committed: true }
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
