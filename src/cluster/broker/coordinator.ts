/**
 * The coordinator's part of a cluster change: it validates a request, plans it with the pure planner, simulates the
 * plan against a copy of the configuration, and records the change in the configuration (persisted and gossiped
 * before the answer), after which the brokers apply its operations (change-executor.ts). It also cancels a change
 * and answers the monitoring request.
 *
 * The coordinator is the member with the lowest id that this broker hears from (`actingCoordinator`): while broker 0
 * runs it coordinates; when it is gone, the next one takes over, so a change whose coordinator died can still be
 * cancelled, and a new one started. A broker asked while it hears from a member with a lower id answers
 * `not-coordinator` with that id, and the gateway asks there.
 *
 * Backups keep some changes from starting: none while a backup is in progress, and once the backup store holds an id
 * above 2^53 − 1, none that adds a broker or places a replica on one that does not say it applies such checkpoint ids
 * (a broker of an earlier version rejects the records carrying them, and its replicas would diverge).
 */
import { isDeepStrictEqual } from "node:util";
import type { Logger } from "pino";
import {
  type AcceptAnswer,
  type AcceptedChange,
  type AcceptTally,
  type Ballot,
  type ClusterConfiguration,
  type ClusterOperation,
  cancelChange,
  decodeConfiguration,
  encodeConfiguration,
  MAX_BALLOT_ROUND,
  majorityOf,
  OperationError,
  PlanningError,
  type PlanRequest,
  type PrepareAnswer,
  type PrepareTally,
  planAddBroker,
  planJoinPartition,
  planLeavePartition,
  planRemoveBroker,
  planRequest,
  reachabilityProblems,
  simulatePlan,
  startChange,
  tallyAcceptances,
  tallyPromises,
  toConfigurationDocument,
  translateBrokersRequest,
  translatePatch,
} from "../topology/index.js";
import { actingCoordinator, operationView } from "./change-executor.js";
import type {
  ClusterChangeCommand,
  ClusterChangeResponse,
  ClusterStatusResponse,
  OperationView,
  PlannedChange,
} from "./protocol.js";

/** What the coordinator needs of its broker. */
export interface CoordinatorContext {
  readonly nodeId: number;
  readonly logger: Logger;
  /** Whether partition scaling (PATCH `partitions.count`) is enabled (experimental). */
  readonly partitionScalingEnabled: boolean;
  configuration(): ClusterConfiguration;
  /**
   * Merges a configuration this broker produced, or one another broker holds, into its own (persisted and gossiped
   * before it resolves); resolves with the configuration the merge produced, before anything else changed it.
   */
  merge(configuration: ClusterConfiguration): Promise<ClusterConfiguration>;
  /**
   * The configuration broker `brokerId` holds, asked over the cluster port, or null when it does not answer in time
   * (or is still starting); absent: no broker is asked.
   */
  configurationOf?(brokerId: number): Promise<ClusterConfiguration | null>;
  /**
   * Phase 1 of having member `brokerId` (this broker included) accept a new change as configuration version
   * `version` (topology/change-acceptance.ts); null when it does not answer in time.
   */
  prepareChange(
    brokerId: number,
    version: number,
    ballot: Ballot,
    othersHoldNothing?: boolean,
  ): Promise<PrepareAnswer | null>;
  /** Phase 2: have member `brokerId` accept `configuration` (encoded) as version `version`; null: no answer. */
  acceptChange(brokerId: number, version: number, ballot: Ballot, configuration: string): Promise<AcceptAnswer | null>;
  isReachable(brokerId: number): boolean;
  /** Ids of every broker this broker knows, members or not (a broker waiting to be added). */
  knownBrokers(): readonly number[];
  /** The current time as ISO 8601 text. */
  now(): string;
  /**
   * Holds backups off until the release (see backups.ts, `holdForChange`), or answers why no change may start now
   * because of a backup; absent: backups never block.
   */
  holdBackups?(): Promise<{ readonly release: () => void } | { readonly refusal: string }>;
  /**
   * Why a change may not add `brokerIds` or place replicas on them because of the backup ids the store holds (see
   * backups.ts, `largeBackupIdProblem`), or null; absent: never.
   */
  largeBackupIdProblem?(brokerIds: readonly number[]): Promise<string | null>;
}

/** Operations that put a broker into the cluster or a replica onto a broker: it then applies the partitions' records. */
const RECEIVING_OPERATIONS: ReadonlySet<ClusterOperation["operation"]> = new Set([
  "BROKER_ADD",
  "PARTITION_JOIN",
  "PARTITION_BOOTSTRAP",
]);

/** The brokers `operations` add to the cluster or place a replica on, ascending. */
function brokersReceivingReplicas(operations: readonly ClusterOperation[]): number[] {
  const brokerIds = new Set<number>();
  for (const operation of operations) {
    if (RECEIVING_OPERATIONS.has(operation.operation)) brokerIds.add(operation.brokerId);
  }
  return [...brokerIds].sort((left, right) => left - right);
}

/** What `ChangeCoordinator.choose` saw of a version it could not decide, for the 409 answer. */
interface Undecided {
  readonly version: number;
  readonly memberCount: number;
  readonly quorum: number;
  /** Whether the change is forced: decided by every broker it keeps rather than a majority of the members. */
  readonly forced: boolean;
  /** The most members that answered one phase. */
  readonly answered: number;
  /** The most members that accepted this coordinator's proposal under one ballot. */
  readonly accepted: number;
  /** Whether a member had promised a higher ballot (another coordinator at the same moment). */
  readonly outvoted: boolean;
  /** Members that abstain for the version (they started without their data), ascending. */
  readonly abstaining: readonly number[];
}

/** Why a change was not chosen, for the 409 answer. */
function undecidedDetail(undecided: Undecided): string {
  const { version, memberCount, quorum, forced, answered, accepted, outvoted, abstaining } = undecided;
  const needed = forced
    ? `every broker it keeps (${memberCount})`
    : `a majority of the ${memberCount} brokers (${quorum})`;
  if (accepted > 0) {
    // Accepted by some members: a later proposal that finds it records it rather than its own, and sending the same
    // request again is such a proposal.
    return (
      `change ${version} was accepted by ${accepted} broker${accepted === 1 ? "" : "s"}, but it needs ${needed} and ` +
      "the others did not accept it in time, so it is not recorded yet; send the same request again: it records " +
      "this change if it was accepted after all (202), or answers which change is in progress (409)"
    );
  }
  if (outvoted) {
    return `another broker is recording a change at the same moment (change ${version}); send the request again`;
  }
  if (abstaining.length > 0) {
    // They answer, but cannot take part: they started without their data and may have promised before.
    return (
      `the change must be accepted by ${needed}, and brokers ${abstaining.join(", ")} abstain from change ${version} ` +
      `(they started without their data) while only ${answered} others answered; they take part once every other ` +
      "member answers with nothing accepted for it, so send the request again once all the others run and are reachable"
    );
  }
  return (
    `the change must be accepted by ${needed}, and only ${answered} answered; send the request again once ` +
    `${forced ? "they all" : "most brokers"} run and are reachable`
  );
}

/** Whether two configurations record the same change: the same id and the same operations. */
function sameChange(left: ClusterConfiguration, right: ClusterConfiguration): boolean {
  const leftChange = left.pendingChange;
  const rightChange = right.pendingChange;
  if (leftChange === null || rightChange === null || leftChange.id !== rightChange.id) return false;
  const plan = (change: NonNullable<ClusterConfiguration["pendingChange"]>): unknown => [
    ...change.completed.map(({ completedAt: _completedAt, ...operation }) => operation),
    ...change.pending,
  ];
  return isDeepStrictEqual(plan(leftChange), plan(rightChange));
}

function refused(
  status: 400 | 404 | 409,
  detail: string,
): { outcome: "refused"; status: 400 | 404 | 409; detail: string } {
  return { outcome: "refused", status, detail };
}

/** See the module comment. */
export class ChangeCoordinator {
  /** The highest ballot round used or seen refused per configuration version (only the next version's matters). */
  private readonly roundsSeen = new Map<number, number>();

  constructor(private readonly context: CoordinatorContext) {}

  /**
   * Plans `command` and, unless `dryRun`, records it as the running change. Before a real change it gathers the
   * configuration every other member holds, as a cancel does: a coordinator that was paused while another broker
   * coordinated then sees the change that broker recorded (and refuses with 409) instead of recording a second one
   * under the same id.
   */
  async change(command: ClusterChangeCommand, dryRun: boolean): Promise<ClusterChangeResponse> {
    const first = this.context.configuration();
    const firstCoordinator = this.coordinatorOtherThanMe(first);
    if (firstCoordinator !== null) return { outcome: "not-coordinator", coordinatorId: firstCoordinator };
    if (!dryRun) await this.gatherConfigurations(first);
    const configuration = this.context.configuration();
    const coordinator = this.coordinatorOtherThanMe(configuration);
    if (coordinator !== null) return { outcome: "not-coordinator", coordinatorId: coordinator };
    let operations: ClusterOperation[];
    let expected: ClusterConfiguration;
    const nowIso = this.context.now();
    const force = "force" in command && command.force;
    try {
      operations = this.plan(configuration, command);
      if (operations.length > 0 && configuration.pendingChange !== null) {
        return refused(409, `Another configuration change [${configuration.pendingChange.id}] is in progress`);
      }
      const reachableBrokers = new Set(this.context.knownBrokers().filter((id) => this.context.isReachable(id)));
      reachableBrokers.add(this.context.nodeId);
      // A dry run previews a scale-up before its new brokers are started (whoever runs the brokers starts them only
      // for the real change), so it does not ask them to run yet; every other broker that must act still must.
      if (dryRun) {
        for (const operation of operations) {
          if (operation.operation === "BROKER_ADD") reachableBrokers.add(operation.brokerId);
        }
      }
      const problems = reachabilityProblems(operations, { reachableBrokers, force });
      if (problems.length > 0) return refused(400, problems.join("; "));
      expected = simulatePlan(configuration, operations, nowIso);
    } catch (error) {
      if (error instanceof PlanningError) return refused(400, error.problems.join("; "));
      if (error instanceof OperationError)
        return refused(error.rule === "change-in-progress" ? 409 : 400, error.message);
      throw error;
    }
    const isPatch = command.kind === "patch";
    if (operations.length === 0) {
      return {
        outcome: "planned",
        change: this.planned(configuration.lastChange?.id ?? 0, configuration, [], configuration, isPatch),
      };
    }
    const changeId = configuration.version + 1;
    if (dryRun)
      return { outcome: "planned", change: this.planned(changeId, configuration, operations, expected, isPatch) };
    let started: ClusterConfiguration;
    try {
      started = startChange(configuration, operations, nowIso);
    } catch (error) {
      if (error instanceof OperationError) return refused(409, error.message);
      throw error;
    }
    // Asked before backups are held off, so that waiting for the brokers' answers does not hold off backups too.
    const largeBackupIds = (await this.context.largeBackupIdProblem?.(brokersReceivingReplicas(operations))) ?? null;
    if (largeBackupIds !== null) return refused(409, largeBackupIds);
    // From here until the change is recorded (a take then finds it) or refused, no backup is taken.
    const hold = (await this.context.holdBackups?.()) ?? { release: () => {} };
    if ("refusal" in hold) return refused(409, hold.refusal);
    try {
      if (this.context.configuration() !== configuration) {
        return refused(409, "the cluster configuration changed while the change was planned; send the request again");
      }
      // A forced change is decided by every broker it keeps (the others are gone, which is why it is forced): a set
      // that overlaps any majority of the members as long as it keeps at least half of them.
      const voters = [...configuration.members.keys()].filter((brokerId) => !force || expected.members.has(brokerId));
      const choice = await this.choose(voters, force, started);
      if (choice.outcome === "refused") return choice;
      const recorded = await this.context.merge(choice.configuration);
      if (!choice.own) {
        return refused(409, `Another configuration change [${changeId}] is in progress`);
      }
      if (recorded.pendingChange?.id !== changeId) {
        return refused(409, "the cluster configuration changed while the change was recorded; send the request again");
      }
    } finally {
      hold.release();
    }
    this.context.logger.info(
      { changeId, operations: operations.length, request: command.kind },
      "cluster change planned and recorded",
    );
    return { outcome: "planned", change: this.planned(changeId, configuration, operations, expected, isPatch) };
  }

  /**
   * Cancels the running change `changeId`; operations already applied stay applied.
   *
   * The cancel is recorded at a higher version, so it replaces every other broker's view of the change wholesale:
   * decided on a view that lags (this broker paused, or cut off while another broker coordinated), it would erase
   * operations that ran meanwhile. So the coordinator first gathers the configuration every other member holds and
   * merges them, then decides. A change that adds partitions, whose started routing must not be undone, is cancelled
   * only when a majority of the members answered, so that a coordinator cut off from most of the cluster cannot undo
   * what the rest did. (A silent minority that went on with the change can still lose its progress; the executor
   * then keeps the data of any replica it would otherwise lose.)
   */
  async cancel(changeId: number): Promise<ClusterStatusResponse> {
    const first = this.context.configuration();
    const firstCoordinator = this.coordinatorOtherThanMe(first);
    if (firstCoordinator !== null) return { outcome: "not-coordinator", coordinatorId: firstCoordinator };
    const answered = await this.gatherConfigurations(first);
    // Read once more after the awaits, and merged without another await in between (`cancelChange` is pure).
    const configuration = this.context.configuration();
    const coordinator = this.coordinatorOtherThanMe(configuration);
    if (coordinator !== null) return { outcome: "not-coordinator", coordinatorId: coordinator };
    const pending = configuration.pendingChange;
    if (pending === null || pending.id !== changeId) {
      const last = configuration.lastChange;
      const running = pending === null ? "no change is in progress" : `change ${pending.id} is in progress`;
      const ended = last === null ? "" : `; the last change, ${last.id}, ended ${last.status}`;
      return refused(404, `no change with id ${changeId} is in progress (${running}${ended})`);
    }
    if (pending.completed.some((done) => done.operation === "START_PARTITION_SCALE_UP")) {
      // The routing has started to change: partitions may already refuse keys they no longer own, with messages
      // half relocated and message ids of moved keys on hold. Stopping would leave that state for good, so a
      // started scale-up runs to its end.
      return refused(
        409,
        `change ${changeId} adds partitions and has started to change the routing; it cannot be cancelled now and ` +
          "completes once every partition's leader is reachable",
      );
    }
    const scalesPartitions = pending.pending.some((operation) => operation.operation === "START_PARTITION_SCALE_UP");
    const members = [...configuration.members.keys()];
    const heard = members.filter((brokerId) => brokerId === this.context.nodeId || answered.has(brokerId));
    if (scalesPartitions && heard.length * 2 <= members.length) {
      const silent = members.filter((brokerId) => !heard.includes(brokerId));
      return refused(
        409,
        `change ${changeId} adds partitions, and cancelling it needs the configurations of a majority of the brokers, ` +
          `to be sure its routing has not started to change: brokers ${silent.join(", ")} did not answer; try again ` +
          "once most brokers run and are reachable",
      );
    }
    await this.context.merge(cancelChange(configuration, this.context.now()));
    this.context.logger.warn({ changeId, pending: pending.pending.length }, "cluster change cancelled");
    return this.status();
  }

  /**
   * Has a majority of `members` (every one of them when `forced`) accept `started`, the configuration recording a new change, as the next version
   * (topology/change-acceptance.ts), and answers the configuration that version was chosen to be: `own` when it
   * records the same change as `started` (this request's, or the same request sent before whose answers were lost),
   * or another coordinator's change that a quorum may have accepted before, which must be recorded instead. One more
   * attempt, with a higher ballot, follows a refusal for a higher ballot or a proposal that some members accepted
   * while others did not answer: its prepare finds what was accepted.
   */
  private async choose(
    members: readonly number[],
    forced: boolean,
    started: ClusterConfiguration,
  ): Promise<{ outcome: "chosen"; configuration: ClusterConfiguration; own: boolean } | ReturnType<typeof refused>> {
    const version = started.version;
    const quorum = forced ? members.length : majorityOf(members.length);
    let undecided: Undecided = {
      version,
      memberCount: members.length,
      quorum,
      forced,
      answered: 0,
      accepted: 0,
      outvoted: false,
      abstaining: [],
    };
    for (let attempt = 1; attempt <= 2; attempt++) {
      const round = this.nextRound(version);
      if (round > MAX_BALLOT_ROUND) break;
      this.roundsSeen.set(version, round);
      const ballot: Ballot = { round, brokerId: this.context.nodeId };
      const promises = await Promise.all(
        members.map((brokerId) => this.context.prepareChange(brokerId, version, ballot).catch(() => null)),
      );
      if (!forced) await this.releaseAbstainers(members, version, ballot, promises);
      const abstaining = members.filter((_, position) => promises[position]?.outcome === "abstaining");
      const promised = tallyPromises(promises, quorum);
      if (promised.outcome === "behind") return this.behind(version, started);
      let outcome: Exclude<PrepareTally, { outcome: "majority" | "behind" }> & { accepted?: number };
      if (promised.outcome === "majority") {
        const accepted = await this.accept(members, quorum, ballot, promised.adopt, started);
        if (accepted.outcome === "chosen") return accepted;
        if (accepted.outcome === "behind") return this.behind(version, started);
        outcome = accepted;
      } else {
        outcome = promised;
      }
      this.roundsSeen.set(version, Math.max(round, outcome.highestRound));
      const accepted = outcome.accepted ?? 0;
      undecided = {
        ...undecided,
        answered: Math.max(undecided.answered, outcome.answered),
        accepted: Math.max(undecided.accepted, accepted),
        outvoted: undecided.outvoted || outcome.highestRound >= round,
        abstaining,
      };
      const uncertain = accepted > 0 && outcome.answered < members.length;
      if (outcome.highestRound < round && !uncertain) break;
    }
    return refused(409, undecidedDetail(undecided));
  }

  /**
   * Asks the members that abstain for `version` (they started without their data) to promise `ballot` after all, in
   * `promises` (one answer per member), when that is safe: every other member promised it with nothing accepted, and
   * the abstaining ones are fewer than a majority, so every majority that could have chosen a change includes a
   * member that remembers it. Without this, one broker whose disk was replaced would block every change of a
   * two-broker cluster for good. Not for a forced change, whose removed brokers are not asked.
   */
  private async releaseAbstainers(
    members: readonly number[],
    version: number,
    ballot: Ballot,
    promises: (PrepareAnswer | null)[],
  ): Promise<void> {
    const abstaining = members.flatMap((_, position) =>
      promises[position]?.outcome === "abstaining" ? [position] : [],
    );
    if (abstaining.length === 0 || abstaining.length >= majorityOf(members.length)) return;
    const othersHoldNothing = promises.every(
      (answer) => answer?.outcome === "abstaining" || (answer?.outcome === "promised" && answer.accepted === null),
    );
    if (!othersHoldNothing) return;
    await Promise.all(
      abstaining.map(async (position) => {
        const brokerId = members[position] as number;
        promises[position] = await this.context.prepareChange(brokerId, version, ballot, true).catch(() => null);
      }),
    );
  }

  /** Phase 2 of `choose` with the promises of a quorum: proposes `adopt`, or `started` when nothing was adopted. */
  private async accept(
    members: readonly number[],
    quorum: number,
    ballot: Ballot,
    adopt: AcceptedChange | null,
    started: ClusterConfiguration,
  ): Promise<
    | { outcome: "chosen"; configuration: ClusterConfiguration; own: boolean }
    | Exclude<AcceptTally, { outcome: "chosen" }>
  > {
    const value = adopt?.configuration ?? encodeConfiguration(started);
    const version = started.version;
    const acceptances = await Promise.all(
      members.map((brokerId) => this.context.acceptChange(brokerId, version, ballot, value).catch(() => null)),
    );
    const accepted = tallyAcceptances(acceptances, quorum);
    if (accepted.outcome !== "chosen") return accepted;
    // The members checked it before they accepted it (a valid configuration of this version recording a change).
    const configuration = decodeConfiguration(value);
    if (configuration.version !== version) {
      throw new Error(
        `change acceptance: version ${version} was chosen as a configuration of ${configuration.version}`,
      );
    }
    return { outcome: "chosen", configuration, own: sameChange(configuration, started) };
  }

  /**
   * A member holds `version` already: takes what the members hold, and answers the change as chosen when it is this
   * very change (recorded by this coordinator's earlier attempt, which gossip spread between the phases), else 409.
   */
  private async behind(
    version: number,
    started: ClusterConfiguration,
  ): Promise<{ outcome: "chosen"; configuration: ClusterConfiguration; own: true } | ReturnType<typeof refused>> {
    await this.gatherConfigurations(this.context.configuration());
    const held = this.context.configuration();
    if (held.version === version && sameChange(held, started)) {
      return { outcome: "chosen", configuration: held, own: true };
    }
    const ended = [held.lastChange, ...held.earlierChanges].find((change) => change?.id === version);
    if (ended !== undefined && ended !== null) {
      // The version was chosen and its change has run meanwhile; its operations are no longer kept, so whether it
      // was this request's cannot be told here.
      return refused(
        409,
        `change ${version} was recorded meanwhile and has ended ${ended.status}; if it was this request's, it is ` +
          "done (GET /actuator/cluster shows the brokers and partitions now), else send the request again",
      );
    }
    return refused(409, "the cluster configuration changed while the change was planned; send the request again");
  }

  /** A round above every round this coordinator used or saw refused for `version`. */
  private nextRound(version: number): number {
    for (const seen of this.roundsSeen.keys()) if (seen < version) this.roundsSeen.delete(seen);
    return (this.roundsSeen.get(version) ?? 0) + 1;
  }

  /**
   * Asks every other member of `configuration` for the configuration it holds, at once, and merges each answer into
   * this broker's; answers the ids of the brokers that answered.
   */
  private async gatherConfigurations(configuration: ClusterConfiguration): Promise<ReadonlySet<number>> {
    const configurationOf = this.context.configurationOf;
    if (configurationOf === undefined) return new Set();
    const others = [...configuration.members.keys()].filter((brokerId) => brokerId !== this.context.nodeId);
    const answers = await Promise.all(
      others.map(async (brokerId) => ({ brokerId, held: await configurationOf(brokerId).catch(() => null) })),
    );
    const answered = new Set<number>();
    for (const { brokerId, held } of answers) {
      if (held === null) continue;
      answered.add(brokerId);
      await this.context.merge(held);
    }
    return answered;
  }

  /** The configuration as this broker holds it, for the monitoring response. */
  status(): ClusterStatusResponse {
    return { outcome: "status", configuration: encodeConfiguration(this.context.configuration()) };
  }

  /** The acting coordinator when it is another broker, else null (this broker coordinates). */
  private coordinatorOtherThanMe(configuration: ClusterConfiguration): number | null {
    const coordinator = actingCoordinator(configuration, (brokerId) => this.context.isReachable(brokerId));
    return coordinator === null || coordinator === this.context.nodeId ? null : coordinator;
  }

  /** The plan of `command` against `configuration`; throws PlanningError for a request that breaks a rule. */
  private plan(configuration: ClusterConfiguration, command: ClusterChangeCommand): ClusterOperation[] {
    switch (command.kind) {
      case "brokers": {
        const request: PlanRequest = translateBrokersRequest(configuration, command.body, {
          force: command.force,
          ...(command.replicationFactor === undefined ? {} : { replicationFactor: command.replicationFactor }),
        });
        return planRequest(configuration, request);
      }
      case "patch": {
        const request: PlanRequest = translatePatch(configuration, command.body, {
          force: command.force,
          partitionScalingEnabled: this.context.partitionScalingEnabled,
        });
        return planRequest(configuration, request);
      }
      case "add-broker":
        return planAddBroker(configuration, command.brokerId);
      case "remove-broker":
        return planRemoveBroker(configuration, command.brokerId);
      case "join":
        return planJoinPartition(configuration, command.brokerId, command.partitionId, command.priority);
      case "leave":
        return planLeavePartition(configuration, command.brokerId, command.partitionId);
    }
  }

  private planned(
    changeId: number,
    current: ClusterConfiguration,
    operations: readonly ClusterOperation[],
    expected: ClusterConfiguration,
    isPatch: boolean,
  ): PlannedChange {
    const plannedChanges: OperationView[] = operations.map((operation) => {
      const view = operationView(operation);
      // The spec shows BROKER_ADD with an empty `brokers` in PATCH responses.
      return isPatch && operation.operation === "BROKER_ADD" ? { ...view, brokers: [] } : view;
    });
    return {
      changeId,
      currentTopology: toConfigurationDocument(current).brokers,
      plannedChanges,
      expectedTopology: toConfigurationDocument(expected).brokers,
    };
  }
}
