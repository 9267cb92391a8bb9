import type { ConsoleApi } from "../api.js";
import type { Session } from "../session.js";

/** What a page is given when it renders. */
export interface PageContext {
  session: Session;
  api: ConsoleApi;
  /** Moves to another page of the console (a path below /console/). */
  navigate(path: string): void;
  /** Replaces the page's heading (and the document's title), e.g. with the name of the resource shown. */
  setTitle(title: string): void;
}

/** One page of the console. */
export interface Page {
  /** Path below /console/ ("" for the overview); a segment `:name` matches any one segment, given as a parameter. */
  path: string;
  /** Heading and navigation label. */
  title: string;
  /** Whether the page is listed in the navigation (pages of one resource are reached from their list instead). */
  listed?: boolean;
  /** Whether the signed-in client's tokens allow the page; pages it may not use are not shown at all. */
  visible(session: Session): boolean;
  /** Builds the page's content; it loads its data itself and updates in place. */
  render(context: PageContext, parameters: Readonly<Record<string, string>>): HTMLElement;
}
