import { h, uniqueId } from "../dom.js";
import { characterCount, field, inputLengthBound } from "../ui.js";

/** Longest client name the Administration API accepts, for a cluster's clients and the organization's alike. */
const maxClientNameLength = 100;

/** A client name's input with its hint and its error, checked by the Administration API's rules as it is typed. */
export interface ClientNameField {
  /** The labelled input, its hint and its error, to place in a form. */
  readonly elements: HTMLElement[];
  readonly input: HTMLInputElement;
  /** Checks the name, shows what is wrong next to the field, and answers it (null when the name is acceptable). */
  check(): string | null;
  /** Shows a problem the API answered (a name taken meanwhile), or clears it with null. */
  show(problem: string | null): void;
}

/**
 * The name field of a client's creation form. `takenNames` are the names already in use where names must be unique,
 * which `where` describes ("the cluster", "the organization").
 */
export function clientNameField(takenNames: () => readonly string[], where: string): ClientNameField {
  const input = h("input", {
    type: "text",
    name: "name",
    maxlength: inputLengthBound(maxClientNameLength),
    autocomplete: "off",
  });
  const error = h("p", { class: "field-error", id: uniqueId("client-name-error") });
  const labelled = field("Name", input, `Unique in ${where}, at most ${maxClientNameLength} characters.`);
  // The hint and the error both describe the name.
  input.setAttribute("aria-describedby", `${input.getAttribute("aria-describedby") ?? ""} ${error.id}`.trim());
  const problemOf = (name: string): string | null => {
    if (name === "") return "Enter a name.";
    if (characterCount(name) > maxClientNameLength) return `A name has at most ${maxClientNameLength} characters.`;
    if (name.trim() !== name) return "A name may not start or end with a blank.";
    // The Administration API's rule: nothing invisible or rearranging (controls, format characters such as
    // bidirectional overrides and zero-width spaces, lone surrogates, line and paragraph separators).
    if (/[\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}]/u.test(name)) return "A name may not hold invisible characters.";
    if (takenNames().includes(name.normalize("NFC"))) return `${capitalized(where)} has a client of this name already.`;
    return null;
  };
  const show = (problem: string | null): void => {
    error.textContent = problem ?? "";
    input.setAttribute("aria-invalid", problem === null ? "false" : "true");
  };
  // Errors appear on submit only and disappear as soon as the name is fixed.
  input.addEventListener("input", () => {
    if (error.textContent !== "") show(problemOf(input.value));
  });
  return {
    elements: [labelled, error],
    input,
    check() {
      const problem = problemOf(input.value);
      show(problem);
      return problem;
    },
    show,
  };
}

function capitalized(text: string): string {
  return `${text.charAt(0).toUpperCase()}${text.slice(1)}`;
}
