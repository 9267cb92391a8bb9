/** What an element may contain: nodes, text, or nothing (false, null and undefined are skipped). */
export type Child = Node | string | number | null | undefined | false | readonly Child[];

/** Attributes and event listeners of an element; `on<event>` keys add listeners, `false`/`undefined` skip. */
export type Attributes = Record<string, string | number | boolean | null | undefined | ((event: Event) => void)>;

/**
 * Creates an element with attributes, listeners and children. Text is always inserted as text nodes, never parsed as
 * markup, so names and messages that come from the APIs cannot inject elements or scripts.
 */
export function h<Tag extends keyof HTMLElementTagNameMap>(
  tag: Tag,
  attributes: Attributes = {},
  ...children: Child[]
): HTMLElementTagNameMap[Tag] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (typeof value === "function") {
      element.addEventListener(name.slice(2).toLowerCase(), value);
    } else if (name === "value" && "value" in element) {
      (element as HTMLInputElement).value = String(value);
    } else {
      element.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(element, children);
  return element;
}

/** Appends children to a parent, flattening arrays and skipping empty values. */
export function append(parent: Node, children: readonly Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(parent, child);
    else if (child instanceof Node) parent.appendChild(child);
    else parent.appendChild(document.createTextNode(String(child)));
  }
}

/** Replaces everything inside `parent` with `children`. */
export function replaceChildren(parent: Element, ...children: Child[]): void {
  parent.replaceChildren();
  append(parent, children);
}

let nextIdentifier = 0;

/** A document-unique id, for tying labels and descriptions to their controls. */
export function uniqueId(prefix: string): string {
  nextIdentifier += 1;
  return `${prefix}-${nextIdentifier}`;
}
