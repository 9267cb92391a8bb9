/**
 * How much buffered messages a broker may hold. A partition keeps every buffered message in memory (the engine is
 * its state), so without a bound a steady stream of publications with long times to live grows a broker until the
 * operating system or V8 ends it: in an attack from outside, brokers holding 1 GB of acknowledged messages had grown to
 * 2.6 GB each, and one under a 768 MiB memory limit died at 135 MB of messages with "heap out of memory", taking its
 * partitions' leadership with it. A broker now refuses new publications, with a 503 that says why, once its
 * partitions hold `maxBufferedMessageBytes` of messages together, or once their messages' objects would fill half of
 * V8's heap; publications resume as messages expire or are correlated.
 */
import { getHeapStatistics } from "node:v8";

/**
 * Heap a buffered message takes beside its record, in bytes: its object, its key in the maps and the deadline heap's
 * entry (measured at 223–250 bytes, see DEVELOPERS.md, "What a stored message holds"), doubled for what varies.
 */
const HEAP_BYTES_PER_MESSAGE = 512;

/** V8's heap limit of this process, fixed at its start (asked for once: every publication checks against it). */
const HEAP_LIMIT_BYTES = getHeapStatistics().heap_size_limit;

/** What a broker's partitions buffer together. */
export interface BufferedMessages {
  readonly messages: number;
  readonly bytes: number;
}

/** Why broker `nodeId` refuses new publications now, or null when it accepts them. */
export function bufferedMessagesRefusal(
  nodeId: number,
  buffered: BufferedMessages,
  maxBytes: number,
  heapLimitBytes: number = HEAP_LIMIT_BYTES,
): string | null {
  if (buffered.bytes >= maxBytes) {
    return (
      `broker ${nodeId} holds ${mebibytes(buffered.bytes)} of buffered messages, its limit ` +
      `(service.broker.memory.maxBufferedMessageBytes) is ${mebibytes(maxBytes)}; publications resume as messages ` +
      "expire or are correlated"
    );
  }
  if (buffered.messages * HEAP_BYTES_PER_MESSAGE >= heapLimitBytes / 2) {
    return (
      `broker ${nodeId} holds ${buffered.messages} buffered messages, as many as half of its heap ` +
      `(${mebibytes(heapLimitBytes)}, --max-old-space-size) can keep; publications resume as messages expire or ` +
      "are correlated"
    );
  }
  return null;
}

function mebibytes(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}
