import type { ConsoleApi } from "../api.js";
import type { Session } from "../session.js";

/** What a page is given when it renders. */
export interface PageContext {
  session: Session;
  api: ConsoleApi;
  /** Moves to another page of the console (a path below /console/). */
  navigate(path: string): void;
}

/** One page of the console. */
export interface Page {
  /** Path below /console/ ("" for the overview). */
  path: string;
  /** Heading and navigation label. */
  title: string;
  /** Whether the signed-in client's tokens allow the page; pages it may not use are not shown at all. */
  visible(session: Session): boolean;
  /** Builds the page's content; it loads its data itself and updates in place. */
  render(context: PageContext): HTMLElement;
}
