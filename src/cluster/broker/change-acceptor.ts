/**
 * This broker's part, as a member, in accepting a new change (topology/change-acceptance.ts): it answers the two
 * phases of a coordinator's proposal, one request at a time, and persists what it promised and accepted before it
 * answers, so that a restart cannot make it promise or accept against what it answered before.
 */
import {
  type AcceptAnswer,
  type AcceptorState,
  accept,
  type Ballot,
  type PrepareAnswer,
  prepare,
  recordedChangeProblem,
} from "../topology/index.js";
import { persistChangeAcceptance } from "./files.js";

/** See the module comment. */
export class ChangeAcceptor {
  /** Requests run one after another: each reads the state the one before persisted. */
  private queue: Promise<unknown> = Promise.resolve();

  /**
   * `state`: what the broker's data directory `directory` holds (`readChangeAcceptance`); `heldVersion`: the version
   * of the configuration the broker holds, read when a request's turn comes.
   */
  constructor(
    private readonly directory: string,
    private state: AcceptorState | null,
    private readonly heldVersion: () => number,
  ) {}

  /** Phase 1: promises `ballot` for configuration version `version`, or answers why not (see the pure `prepare`). */
  prepare(version: number, ballot: Ballot, othersHoldNothing = false): Promise<PrepareAnswer> {
    return this.inTurn(() => prepare(this.state, this.heldVersion(), version, ballot, othersHoldNothing));
  }

  /** Phase 2: accepts `configuration` (encoded) as version `version` under `ballot`, or answers why not. */
  accept(version: number, ballot: Ballot, configuration: string): Promise<AcceptAnswer> {
    // Checked here too (the peer request was checked when parsed): a value accepted here may be chosen, and every
    // later coordinator must then record it.
    const problem = recordedChangeProblem(configuration, version);
    if (problem !== null) return Promise.reject(new Error(`change acceptance: ${problem}`));
    return this.inTurn(() => accept(this.state, this.heldVersion(), version, ballot, configuration));
  }

  /**
   * Abstains for configuration version `version` (see `AcceptorState.abstaining`), durably: called when the broker,
   * a member, started without its data and learned version `version` − 1 from the others.
   */
  abstain(version: number): Promise<void> {
    return this.inTurn(() => ({
      answer: undefined,
      state: { version, promised: { round: 1, brokerId: 0 }, accepted: null, abstaining: true },
    }));
  }

  private inTurn<Answer>(step: () => { answer: Answer; state: AcceptorState | null }): Promise<Answer> {
    const turn = this.queue.then(async () => {
      const { answer, state } = step();
      if (state !== null) {
        // Durable before the answer leaves: a promise or acceptance forgotten in a crash could let two changes win.
        await persistChangeAcceptance(this.directory, state);
        this.state = state;
      }
      return answer;
    });
    this.queue = turn.catch(() => undefined);
    return turn;
  }
}
