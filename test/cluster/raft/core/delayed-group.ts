/**
 * A scripted group whose messages take a fixed number of ticks to arrive, for tests of flow control under latency.
 * Each tick: every running member ticks, then, until nothing moves, the messages due are delivered and every member's
 * ready batches are persisted at once (`persistReady`) and advanced, their messages leaving with the latency. With a
 * latency of 0 a message arrives in the tick it was sent. Tests may drop or rewrite messages in flight.
 */
import type { Message } from "../../../../src/cluster/raft/core/messages.js";
import { RaftNode, type RaftNodeOptions } from "../../../../src/cluster/raft/core/raft.js";
import { SeededRandom } from "../../../../src/cluster/raft/core/random.js";
import type { Member, MemberId } from "../../../../src/cluster/raft/types.js";
import { SimulatedDisk } from "../../../simulation/disk.js";
import { persistReady, testOptions } from "./scripted-group.js";

/** A message in flight and the tick it arrives at. */
interface InFlight {
  readonly message: Message;
  readonly deliverAt: number;
}

/** One copy of a message to deliver, later than the latency by `extraDelayTicks`. */
export interface Delivery {
  readonly message: Message;
  readonly extraDelayTicks: number;
}

/** What happens to a message as it is sent: delivered (perhaps rewritten), dropped, or delivered as several copies. */
export type MessageFilter = (message: Message) => Message | "drop" | readonly Delivery[];

/** A group on a network with a fixed one-way latency. */
export class DelayedGroup {
  readonly disks = new Map<MemberId, SimulatedDisk>();
  private readonly nodes = new Map<MemberId, RaftNode | null>();
  private queue: InFlight[] = [];
  /** Every message sent, with the tick it was sent at (dropped ones included). */
  readonly sent: { readonly message: Message; readonly tick: number }[] = [];
  /** Applied to every message as it is sent; the identity unless a test sets it. */
  filter: MessageFilter = (message) => message;
  latencyTicks = 0;
  now = 0;

  constructor(
    private readonly members: readonly Member[],
    private readonly overrides: Partial<RaftNodeOptions>,
  ) {
    for (const member of members) {
      this.disks.set(member.id, new SimulatedDisk());
      this.start(member.id);
    }
  }

  /** The node of a running member. */
  node(id: MemberId): RaftNode {
    const node = this.nodes.get(id);
    if (!node) throw new Error(`member ${id} is not running`);
    return node;
  }

  /** The disk of a member (running or not). */
  disk(id: MemberId): SimulatedDisk {
    const disk = this.disks.get(id);
    if (!disk) throw new Error(`no member ${id}`);
    return disk;
  }

  /** Stops a member: what it had not persisted and the messages on their way to it are lost. */
  crash(id: MemberId): void {
    this.nodes.set(id, null);
    this.queue = this.queue.filter((item) => item.message.to !== id);
  }

  /** Starts a member again from its disk. */
  restart(id: MemberId): void {
    this.start(id);
  }

  /** The running leader with the highest term, if any. */
  leader(): MemberId | null {
    let best: { id: MemberId; term: number } | null = null;
    for (const [id, node] of this.nodes) {
      const status = node?.status();
      if (status?.role === "leader" && (!best || status.term > best.term)) best = { id, term: status.term };
    }
    return best?.id ?? null;
  }

  /** Advances `count` ticks (see the module comment). */
  tick(count = 1): void {
    for (let round = 0; round < count; round++) {
      this.now++;
      for (const node of this.nodes.values()) node?.tick();
      this.flush();
    }
  }

  /** Ticks until `condition` holds; throws after `maxTicks`. Returns the ticks it took. */
  tickUntil(condition: () => boolean, maxTicks: number, description: string): number {
    const start = this.now;
    while (!condition()) {
      if (this.now - start >= maxTicks) throw new Error(`not within ${maxTicks} ticks: ${description}`);
      this.tick();
    }
    return this.now - start;
  }

  /** Chunk messages sent so far to `member`. */
  chunksSentTo(member: MemberId): { readonly offset: number; readonly index: number; readonly tick: number }[] {
    return this.sent.flatMap(({ message, tick }) =>
      message.type === "snapshotChunk" && message.to === member
        ? [{ offset: message.offset, index: message.metadata.index, tick }]
        : [],
    );
  }

  /** Messages in flight right now. */
  inFlight(): readonly Message[] {
    return this.queue.map((item) => item.message);
  }

  private start(id: MemberId): void {
    const disk = this.disk(id);
    this.nodes.set(
      id,
      new RaftNode({
        ...testOptions(this.overrides),
        random: new SeededRandom(id * 7919),
        bootstrap: { members: this.members },
        id,
        storage: disk,
        persisted: disk.loadSync(),
      }),
    );
  }

  private send(message: Message): void {
    const filtered = this.filter(message);
    this.sent.push({ message, tick: this.now });
    if (filtered === "drop") return;
    const copies = Array.isArray(filtered) ? filtered : [{ message: filtered as Message, extraDelayTicks: 0 }];
    for (const copy of copies) {
      this.queue.push({ message: copy.message, deliverAt: this.now + this.latencyTicks + copy.extraDelayTicks });
    }
  }

  /** Delivers what is due and processes ready batches until nothing moves (bounded); `tick` ends with it. */
  flush(): void {
    for (let round = 0; round < 10_000; round++) {
      let moved = false;
      const due = this.queue.filter((item) => item.deliverAt <= this.now);
      this.queue = this.queue.filter((item) => item.deliverAt > this.now);
      for (const { message } of due) {
        moved = true;
        this.nodes.get(message.to)?.step(message);
      }
      for (const [id, node] of this.nodes) {
        const ready = node?.ready();
        if (!node || !ready) continue;
        moved = true;
        for (const message of ready.messagesBeforePersist) this.send(message);
        persistReady(this.disk(id), ready);
        for (const message of ready.messages) this.send(message);
        node.advance(ready);
      }
      if (!moved) return;
    }
    throw new Error("delayed group did not settle");
  }
}
