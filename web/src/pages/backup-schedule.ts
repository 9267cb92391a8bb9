import { ApiError, type BackupSchedule } from "../api.js";
import { h, replaceChildren, uniqueId } from "../dom.js";
import { clearStatus, confirmAction, field, formatInstant, showStatus } from "../ui.js";
import { type ClusterTabContext, sessionEnded } from "./cluster-tabs.js";

/** Most complete backups a schedule keeps (the Administration API refuses more). */
const maxKeptBackups = 100;
/** Longest cron expression the Administration API takes. */
const maxCronLength = 200;

/**
 * What is wrong with a cron expression before it is sent, or null: only its shape (five fields). Whether it runs at
 * all and at most every 15 minutes is the platform's verdict, shown on the field as it answers.
 */
function cronProblem(value: string): string | null {
  const fields = value.trim().split(/\s+/);
  if (value.trim() === "") return "Enter a cron expression, e.g. 0 3 * * * for every day at 03:00 UTC.";
  if (value.length > maxCronLength) return `A cron expression has at most ${maxCronLength} characters.`;
  if (fields.length !== 5)
    return `A cron expression has five fields (minute hour day month weekday), not ${fields.length}.`;
  return null;
}

function keepProblem(value: string): string | null {
  const keep = Number(value);
  if (!/^\d+$/.test(value.trim()) || keep < 1 || keep > maxKeptBackups) {
    return `Keep between 1 and ${maxKeptBackups} backups.`;
  }
  return null;
}

/**
 * The platform's refusal of a field, from the problem document that names it (`body/cron …`), reworded for the
 * form: `subject` replaces the field's path. Null when the refusal is about something else.
 */
function refusalOf(error: unknown, fieldName: string, subject: string): string | null {
  if (!(error instanceof ApiError) || error.status !== 400) return null;
  const prefix = `body/${fieldName} `;
  const at = error.message.indexOf(prefix);
  return at === -1 ? null : `${subject} ${error.message.slice(at + prefix.length)}`;
}

/** What the summary says of a last run that could not start a backup: why, and when it is tried again. */
function failureDetails(schedule: BackupSchedule): HTMLElement[] {
  const failure = schedule.lastFailure ?? null;
  if (failure === null) return [];
  const failures = schedule.consecutiveFailures ?? 1;
  const retryAt = schedule.retryAt ?? null;
  return [
    h("dt", {}, "Last run failed"),
    h(
      "dd",
      { class: "problem" },
      `${failures === 1 ? "The run" : `${failures} runs in a row`} could not start a backup: ${failure.replace(/\.$/, "")}. `,
      schedule.retrying === true
        ? "It is being tried again now."
        : retryAt === null
          ? "The next scheduled run tries again."
          : h("span", {}, "Tried again at ", h("time", { datetime: retryAt }, formatInstant(retryAt)), "."),
    ),
  ];
}

/**
 * The cluster's backup schedule (a card in the Backups tab): what it is, when it runs next and ran last, and a form
 * that sets or removes it. The form checks the expression's shape as it is typed and shows the platform's own verdict
 * on the field it names.
 */
export function backupScheduleCard(tab: ClusterTabContext): HTMLElement {
  const headingId = uniqueId("schedule-title");
  const summary = h("div", {}, h("p", {}, "Loading the schedule…"));
  const cron = h("input", {
    type: "text",
    name: "cron",
    maxlength: maxCronLength,
    autocomplete: "off",
    spellcheck: "false",
  });
  const keep = h("input", { type: "number", name: "keep", min: 1, max: maxKeptBackups, step: 1, value: "7" });
  const cronError = h("p", { class: "field-error", id: uniqueId("cron-error") });
  const keepError = h("p", { class: "field-error", id: uniqueId("keep-error") });
  const save = h("button", { type: "submit" }, "Save schedule");
  const remove = h("button", { type: "button", class: "danger", hidden: true }, "Remove schedule");
  const showProblem = (control: HTMLInputElement, error: HTMLElement, problem: string | null): void => {
    error.textContent = problem ?? "";
    control.setAttribute("aria-invalid", problem === null ? "false" : "true");
  };
  const cronField = field(
    "Schedule (cron, UTC)",
    cron,
    "Five fields: minute hour day month weekday; at most every 15 minutes.",
  );
  cron.setAttribute("aria-describedby", `${cron.getAttribute("aria-describedby") ?? ""} ${cronError.id}`.trim());
  keep.setAttribute("aria-describedby", keepError.id);
  for (const control of [cron, keep]) {
    control.addEventListener("input", () => {
      edited = true;
    });
  }
  cron.addEventListener("input", () => {
    if (cronError.textContent !== "") showProblem(cron, cronError, cronProblem(cron.value));
  });
  keep.addEventListener("input", () => {
    if (keepError.textContent !== "") showProblem(keep, keepError, keepProblem(keep.value));
  });

  // Set once the user types: the schedule read as the page opens must not overwrite what they started to enter.
  let edited = false;
  const show = (schedule: BackupSchedule | null): void => {
    remove.hidden = schedule === null;
    if (schedule === null) {
      replaceChildren(summary, h("p", {}, "No schedule: backups are taken only when someone asks for one."));
      return;
    }
    if (!edited) {
      cron.value = schedule.cron;
      keep.value = String(schedule.keep);
    }
    replaceChildren(
      summary,
      h(
        "dl",
        { class: "details" },
        h("dt", {}, "Runs"),
        h("dd", {}, h("code", {}, schedule.cron), " (UTC)"),
        h("dt", {}, "Keeps"),
        h("dd", {}, `the newest ${schedule.keep} complete backup${schedule.keep === 1 ? "" : "s"}`),
        h("dt", {}, "Next run"),
        h(
          "dd",
          {},
          schedule.nextRun === null ? "—" : h("time", { datetime: schedule.nextRun }, formatInstant(schedule.nextRun)),
        ),
        h("dt", {}, "Last run"),
        h(
          "dd",
          {},
          schedule.lastRun === null
            ? "not yet"
            : h("time", { datetime: schedule.lastRun }, formatInstant(schedule.lastRun)),
        ),
        ...failureDetails(schedule),
      ),
    );
  };

  const form = h(
    "form",
    { method: "post", novalidate: true, "aria-labelledby": headingId, class: "card" },
    h("h2", { id: headingId }, "Backup schedule"),
    summary,
    h(
      "div",
      { class: "grid" },
      h("div", {}, cronField, cronError),
      h("div", {}, field("Backups to keep", keep), keepError),
    ),
    h("div", { class: "actions" }, save, remove),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    clearStatus(tab.status);
    const problems = [cronProblem(cron.value), keepProblem(keep.value)] as const;
    showProblem(cron, cronError, problems[0]);
    showProblem(keep, keepError, problems[1]);
    if (problems[0] !== null) return cron.focus();
    if (problems[1] !== null) return keep.focus();
    save.disabled = true;
    tab.context.api
      .setBackupSchedule(tab.clusterId, cron.value.trim(), Number(keep.value))
      .then((schedule) => {
        edited = false;
        show(schedule);
        showStatus(tab.status, "The backup schedule was saved.", "success");
      })
      .catch((error: unknown) => {
        if (sessionEnded(error)) return;
        const cronRefusal = refusalOf(error, "cron", "The expression");
        const keepRefusal = refusalOf(error, "keep", "The number of backups to keep");
        if (cronRefusal !== null) {
          showProblem(cron, cronError, cronRefusal);
          cron.focus();
        } else if (keepRefusal !== null) {
          showProblem(keep, keepError, keepRefusal);
          keep.focus();
        } else showStatus(tab.status, `The schedule was not saved: ${(error as Error).message}`);
      })
      .finally(() => {
        save.disabled = false;
      });
  });
  remove.addEventListener("click", () => {
    void (async () => {
      const confirmed = await confirmAction({
        title: "Remove the backup schedule",
        message: "No more backups are taken on a schedule. The backups taken so far stay.",
        confirmLabel: "Remove schedule",
      });
      if (!confirmed) return;
      clearStatus(tab.status);
      try {
        await tab.context.api.deleteBackupSchedule(tab.clusterId);
        show(null);
        showStatus(tab.status, "The backup schedule was removed.", "success");
      } catch (error) {
        if (!sessionEnded(error)) showStatus(tab.status, `The schedule was not removed: ${(error as Error).message}`);
      }
    })();
  });
  tab.context.api
    .backupSchedule(tab.clusterId)
    .then(show)
    .catch((error: unknown) => {
      if (!sessionEnded(error)) showStatus(tab.status, `The schedule could not be loaded: ${(error as Error).message}`);
    });
  return form;
}
