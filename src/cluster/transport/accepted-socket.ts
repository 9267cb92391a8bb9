/**
 * Gives an accepted connection the `onread` option that Node offers only to sockets it creates for `connect`.
 *
 * A transport's largest frames (snapshot chunks, large appends) arrive on connections that peers opened to it, so
 * reading them into the frame decoder's memory (see framed-connection.ts) matters most there. `net.Server` creates
 * accepted sockets itself and takes no `onread`; the socket constructor, however, accepts the handle of an accepted
 * connection (`handle`, the option the server itself passes), and applies `onread` to it. So the server pauses every
 * socket it accepts (`pauseOnConnect`), and this module moves the connection's handle to a socket created with
 * `onread` before anything was read. Both are Node internals that every release since the option's introduction
 * keeps (Node 12 to 24); a test reads a large frame over an accepted connection and checks where it landed, so a
 * release that changes them fails the suite instead of slowing every transfer down unnoticed.
 */
import type { OnReadOpts, SocketConstructorOpts } from "node:net";
import { Socket } from "node:net";

/** The part of an accepted socket this module moves: its connection handle. */
interface SocketWithHandle {
  _handle: object | null;
}

/** Options of the socket constructor, with the connection handle that Node's own server passes and `onread`. */
interface SocketFromHandleOptions extends SocketConstructorOpts {
  readonly handle: object;
  readonly onread: OnReadOpts;
}

/**
 * Returns a socket for the connection `accepted` holds, reading with `onread`; `accepted` must come from a server
 * with `pauseOnConnect` (nothing read yet). `accepted` is left without a connection and destroyed, which also ends
 * the server's count of it: the transport bounds and closes its connections itself.
 */
export function adoptAcceptedSocket(accepted: Socket, onread: OnReadOpts): Socket {
  const holder = accepted as unknown as SocketWithHandle;
  const handle = holder._handle;
  if (handle === null || accepted.readableFlowing !== false) {
    throw new Error("invariant violated: an accepted socket is adopted before it reads or closes");
  }
  holder._handle = null;
  accepted.destroy();
  const options: SocketFromHandleOptions = { handle, onread, readable: true, writable: true };
  return new Socket(options);
}
