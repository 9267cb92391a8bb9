/**
 * A read-only view of a DMN file: each decision with its decision table (inputs, outputs and rules, as the modeller
 * shows them) or its literal expression. The XML is read with DOMParser and shown as text nodes only.
 */
import { h } from "../dom.js";
import { table } from "../ui.js";

/** Most rules shown per table; a larger table says how many it left out. */
const maximumShownRules = 1_000;

/** The elements directly inside `parent` named `localName` in the file's DMN namespace. */
function childrenNamed(parent: Element, localName: string): Element[] {
  return [...parent.children].filter(
    (child) => child.namespaceURI === parent.namespaceURI && child.localName === localName,
  );
}

/** The text of the `<text>` element inside `element`'s child `localName`, trimmed. */
function textOf(element: Element | undefined, localName?: string): string {
  if (element === undefined) return "";
  const holder = localName === undefined ? element : childrenNamed(element, localName)[0];
  if (holder === undefined) return "";
  return (childrenNamed(holder, "text")[0]?.textContent ?? "").trim();
}

/** A rule cell: its expression, or "-" (any value) when empty, as DMN writes it. */
function entry(text: string): string {
  return text === "" ? "-" : text;
}

function decisionTable(decisionName: string, tableElement: Element): HTMLElement {
  const inputs = childrenNamed(tableElement, "input");
  const outputs = childrenNamed(tableElement, "output");
  const rules = childrenNamed(tableElement, "rule");
  const hitPolicy = tableElement.getAttribute("hitPolicy") ?? "UNIQUE";
  const aggregation = tableElement.getAttribute("aggregation");
  const headings = [
    "#",
    ...inputs.map((input) => {
      const expression = textOf(input, "inputExpression");
      const labelText = input.getAttribute("label") ?? "";
      return `When: ${labelText !== "" ? labelText : expression}${labelText !== "" && expression !== "" ? ` (${expression})` : ""}`;
    }),
    ...outputs.map((output) => `Then: ${output.getAttribute("label") || output.getAttribute("name") || "output"}`),
    "Annotation",
  ];
  const rows = rules
    .slice(0, maximumShownRules)
    .map((rule, index) => [
      String(index + 1),
      ...childrenNamed(rule, "inputEntry").map((cell) => h("code", {}, entry(textOf(cell)))),
      ...childrenNamed(rule, "outputEntry").map((cell) => h("code", {}, entry(textOf(cell)))),
      (childrenNamed(rule, "description")[0]?.textContent ?? "").trim(),
    ]);
  return h(
    "div",
    { class: "decision-table" },
    h(
      "p",
      {},
      "Hit policy: ",
      h("strong", {}, aggregation === null ? hitPolicy : `${hitPolicy} ${aggregation}`),
      ` · ${rules.length} ${rules.length === 1 ? "rule" : "rules"}`,
    ),
    table(`Decision table of ${decisionName}`, headings, rows),
    rules.length > maximumShownRules
      ? h("p", { class: "note" }, `Only the first ${maximumShownRules} rules are shown.`)
      : null,
  );
}

/** The decisions of a DMN file, or a note saying why they cannot be shown. */
export function dmnView(xml: string): HTMLElement {
  const parsed = new DOMParser().parseFromString(xml, "application/xml");
  const root = parsed.documentElement;
  if (parsed.getElementsByTagName("parsererror").length > 0 || root === null) {
    return h("p", { class: "note" }, "The decisions cannot be shown: the file is not well-formed XML.");
  }
  const decisions = childrenNamed(root, "decision");
  if (decisions.length === 0) return h("p", { class: "note" }, "The file holds no decisions.");
  return h(
    "div",
    { class: "dmn-view" },
    decisions.map((decision) => {
      const name = decision.getAttribute("name") || decision.getAttribute("id") || "Decision";
      const tableElement = childrenNamed(decision, "decisionTable")[0];
      const literal = childrenNamed(decision, "literalExpression")[0];
      let body: HTMLElement;
      if (tableElement !== undefined) body = decisionTable(name, tableElement);
      else if (literal !== undefined) {
        const variable = childrenNamed(decision, "variable")[0]?.getAttribute("name");
        body = h(
          "div",
          {},
          h("p", {}, "Literal expression", variable ? ` for ${variable}` : "", ":"),
          h("pre", { class: "code", tabindex: 0, "aria-label": `Literal expression of ${name}` }, textOf(literal)),
        );
      } else body = h("p", { class: "note" }, "This decision has no decision table or literal expression yet.");
      return h(
        "section",
        { class: "decision" },
        h("h3", {}, name, " ", h("code", {}, decision.getAttribute("id") ?? "")),
        body,
      );
    }),
  );
}
