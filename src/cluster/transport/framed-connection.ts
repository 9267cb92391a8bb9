/**
 * A TCP socket carrying frames: decodes incoming reads into envelopes and reports the end of the connection
 * exactly once, whatever ended it (peer close, socket error, protocol error, local close).
 *
 * The socket reads into memory its frame decoder hands out (Node's `onread`), not into a buffer Node allocates per
 * read: a large frame's body is read where it is kept instead of being copied there from the reads, and a receiver
 * no longer allocates a read's worth of memory for the garbage collector to account for and reclaim on every read
 * (see DEVELOPERS.md, "Snapshots").
 */
import type { OnReadOpts, Socket } from "node:net";
import type { RetainedRegions } from "../../buffers/retained-regions.js";
import { type EndOfTurnWriter, type FlushPriority, flushAtEndOfTurn } from "./end-of-turn-flush.js";
import type { Envelope } from "./envelope.js";
import { parseEnvelope } from "./envelope.js";
import { FrameDecoder } from "./framing.js";

/** Callbacks and limits of a FramedConnection. */
export interface FramedConnectionOptions {
  readonly maxFrameBytes: number;
  /** Called for every envelope, in arrival order. */
  readonly onEnvelope: (envelope: Envelope, frameBytes: number) => void;
  /** Called once when the socket is gone; `error` is set when it ended abnormally. */
  readonly onClose: (error: Error | undefined) => void;
  /** Called when the socket's write buffer has drained below its high-water mark. */
  readonly onDrain?: () => void;
  /** Whether this connection's writes leave before those of others at the end of a turn (default "messages"). */
  readonly flushPriority?: FlushPriority;
  /** Where large bodies their sender flagged as retained are read into (see FrameDecoderOptions.retainedBodies). */
  readonly retainedBodies?: RetainedRegions;
}

/**
 * Opens (or takes over) the socket of a connection with the given `onread` option, so that its reads land in the
 * connection's frame decoder; see `connect` for outbound sockets and `adoptAcceptedSocket` for accepted ones.
 */
export type OpenSocket = (onread: OnReadOpts) => Socket;

/** One framed socket; see the module comment. */
export class FramedConnection implements EndOfTurnWriter {
  private readonly decoder: FrameDecoder;
  private readonly flushPriority: FlushPriority;
  private closed = false;
  private corked = false;
  /** The socket, from `openSocket`. */
  readonly socket: Socket;

  constructor(
    openSocket: OpenSocket,
    private readonly options: FramedConnectionOptions,
  ) {
    this.decoder = new FrameDecoder({ maxFrameBytes: options.maxFrameBytes, retainedBodies: options.retainedBodies });
    this.flushPriority = options.flushPriority ?? "messages";
    const socket = openSocket({
      buffer: () => this.decoder.readBuffer(),
      callback: (bytesRead) => {
        this.receive(bytesRead);
        return true;
      },
    });
    this.socket = socket;
    socket.setNoDelay(true);
    socket.on("error", (error) => this.close(error));
    socket.on("close", () => this.close(undefined));
    socket.on("drain", () => {
      if (!this.closed) {
        options.onDrain?.();
      }
    });
  }

  /** Whether the connection has ended (no more writes or envelopes). */
  get isClosed(): boolean {
    return this.closed;
  }

  /** Bytes accepted by `write` but not yet handed to the kernel. */
  get pendingWriteBytes(): number {
    return this.socket.writableLength;
  }

  /** Bytes read from the socket so far. */
  get bytesRead(): number {
    return this.socket.bytesRead;
  }

  /** Changes where flagged bodies are read into from the next frame header on (see FrameDecoder.retainedBodies). */
  set retainedBodies(retainedBodies: RetainedRegions | undefined) {
    this.decoder.retainedBodies = retainedBodies;
  }

  /** Changes the largest incoming frame accepted from the next frame header on (see FrameDecoder.maxFrameBytes). */
  set maxFrameBytes(maxFrameBytes: number) {
    this.decoder.maxFrameBytes = maxFrameBytes;
  }

  /**
   * Writes one encoded frame; returns false when the socket's buffer is full (wait for drain before writing more).
   * Frames written in the same turn of the event loop leave together in one system call at the end of the turn
   * (see `end-of-turn-flush.ts`). `onWritten` is called once the socket is done with the frame; a connection closed
   * already writes nothing and never calls it.
   */
  write(frame: Buffer, onWritten?: () => void): boolean {
    if (this.closed) {
      return false;
    }
    if (!this.corked) {
      this.corked = true;
      this.socket.cork();
      flushAtEndOfTurn(this, this.flushPriority);
    }
    // The socket calls `onWritten` once it is done with the frame, written or failed (a destroyed socket fails the
    // writes it still held).
    return onWritten === undefined ? this.socket.write(frame) : this.socket.write(frame, onWritten);
  }

  /** Hands the frames written during this turn to the kernel; called once per turn in which it wrote. */
  endTurn(): void {
    this.corked = false;
    try {
      this.socket.uncork();
    } catch (error) {
      // A socket that cannot flush would hold its frames for ever; ending it makes the link reconnect.
      this.close(error instanceof Error ? error : new Error(String(error)));
    }
  }

  /** Ends the connection now (buffered writes are discarded) and reports `error` to onClose. */
  close(error: Error | undefined): void {
    if (this.closed) {
      return;
    }
    this.closed = true;
    this.socket.destroy();
    this.options.onClose(error);
  }

  /**
   * Ends the connection after one last frame (a handshake refusal, so the other side learns why): nothing more is
   * read or reported, onClose is called now, and the socket is destroyed as soon as the kernel has taken the frame,
   * so a peer that keeps its end open holds nothing here.
   */
  closeAfterWriting(frame: Buffer, error: Error | undefined): void {
    if (this.closed) {
      return;
    }
    this.closed = true;
    // `end` uncorks a socket corked earlier in this turn, so the frames written before this one leave first.
    this.socket.end(frame, () => this.socket.destroy());
    this.options.onClose(error);
  }

  private receive(bytesRead: number): void {
    if (this.closed) {
      return;
    }
    let envelopes: { envelope: Envelope; frameBytes: number }[];
    try {
      envelopes = this.decoder.commitRead(bytesRead).map((frame) => ({
        envelope: parseEnvelope(frame.value),
        frameBytes: frame.frameBytes,
      }));
    } catch (error) {
      this.close(error as Error);
      return;
    }
    for (const { envelope, frameBytes } of envelopes) {
      // A handler may close the connection while we dispatch the rest of the chunk.
      if (this.closed) {
        return;
      }
      this.options.onEnvelope(envelope, frameBytes);
    }
  }
}
