// eval's support plugin for the DeepSeek Harness (headless): the user-questions provider.
//
// Every question the Harness asks its user — the `ask_user_question` tool, Plan Lattice's intake,
// plan review — goes to `ctx.userQuestions.ask`, which calls the one registered provider. Headless
// dsh registers none, so such a question failed with NO_PROVIDER. This provider sends each
// question, one POST per question, to eval's clarify channel on the shim's relay (the origin of
// DEEPSEEK_BASE_URL, the road the model calls already take: no other network path and no key),
// and returns eval's answer as the question's free-text answer. eval records, counts and answers
// it; a question eval refuses (over the protocol's limit, too large) comes back as an error the
// model reads in its tool result, never a crash.
export const name = 'eval-dsh-support'
export const inject = ['userQuestions']

/** The text eval records and its oracle answers: the question, its detail, its options. */
export function questionText(question) {
  const parts = [String(question.question ?? '')]
  if (typeof question.detail === 'string' && question.detail !== '') parts.push(question.detail)
  const labels = (question.options ?? []).map(option => String(option?.label ?? ''))
  if (labels.length > 0) parts.push(`Options: ${labels.join('; ')}`)
  return parts.join('\n\n')
}

function clarifyUrl() {
  const base = process.env.DEEPSEEK_BASE_URL
  if (base === undefined || base === '') throw new Error('eval: DEEPSEEK_BASE_URL is not set; no clarify channel')
  return new URL('/_eval/clarify', base).href
}

async function ask(question, signal, answered) {
  const response = await fetch(clarifyUrl(), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ question: questionText(question) }),
    signal,
  })
  const text = await response.text()
  let payload
  try {
    payload = JSON.parse(text)
  } catch {
    payload = undefined
  }
  if (response.ok && typeof payload?.answer === 'string') return payload.answer
  const why = typeof payload?.error === 'string' ? payload.error : `HTTP ${response.status}`
  // Thrown inside the tool's execute: the Harness hands the message to the model as the tool's
  // failure, and the agent goes on.
  const before = answered.map(a => `${a.id}: ${a.custom}`).join('; ')
  const error = new Error(`eval refused question ${JSON.stringify(question.id)}: ${why}`
    + (before === '' ? '' : ` (answers to the questions before it: ${before})`))
  error.code = 'EVAL_QUESTION_REFUSED'
  throw error
}

export function apply(ctx) {
  ctx.userQuestions.registerProvider({
    async ask(request) {
      const answers = []
      for (const question of request.questions) {
        answers.push({ id: question.id, selected: [], custom: await ask(question, request.signal, answers) })
      }
      return { answers }
    },
  })
}
