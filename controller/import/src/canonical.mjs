// The one helper of v0.4's eval/lib/canonical.mjs that simple-grader.mjs imports (written by
// `eval import v04-simple`): the hex sha256 of some bytes.
import { createHash } from 'node:crypto'

export function sha256(bytes) {
  return createHash('sha256').update(bytes).digest('hex')
}
