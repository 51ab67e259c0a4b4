// What the consumer scripts share: a kafkajs consumer reading TOPIC from the beginning, each
// value handed to `take`, which returns true once enough came.
// startConsuming resolves once the consumer runs, to { finished }: a promise settled when
// `take` said enough or timeoutMs passed.
async function startConsuming (consumer, topic, take, timeoutMs) {
  let done
  const finished = new Promise(resolve => { done = resolve })
  const timer = setTimeout(done, Number(timeoutMs))
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ message }) => {
      if (take(message.value.toString())) done()
    }
  })
  return { finished: finished.then(() => clearTimeout(timer)) }
}

module.exports = { startConsuming }
