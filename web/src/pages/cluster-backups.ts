import type { ClusterBackup, ClusterRestore } from "../api.js";
import { h, replaceChildren, uniqueId } from "../dom.js";
import {
  clearStatus,
  confirmAction,
  formatInstant,
  refreshContent,
  repeatWhileShown,
  showStatus,
  table,
} from "../ui.js";
import { backupScheduleCard } from "./backup-schedule.js";
import { type ClusterTabContext, clusterTabPage, sessionEnded } from "./cluster-tabs.js";

/** How often the list is read while it is shown: a backup in progress finishes by itself. */
const listPollMs = 3_000;
/** How often a running restore is asked about. */
const restorePollMs = 2_000;
/** How long after it ended a restore is still shown when the page opens. */
const recentRestoreMs = 3_600_000;

/** The steps a successful restore goes through, in order, with what each means. */
const restoreSteps: readonly { state: string; label: string }[] = [
  { state: "PENDING", label: "Waiting to start" },
  { state: "VALIDATING", label: "Checking the backup" },
  { state: "IN_PROGRESS", label: "Restoring every broker" },
  { state: "COMPLETED", label: "Cluster restored and started" },
];

function statusBadge(backup: ClusterBackup): HTMLElement {
  const kind = backup.status === "Complete" ? "healthy" : backup.status === "Failed" ? "unhealthy" : "creating";
  return h("span", { class: `badge status-${kind}` }, backup.status);
}

function instant(iso: string | null): Node | string {
  return iso === null ? "—" : h("time", { datetime: iso }, formatInstant(iso));
}

/**
 * A cluster's backups (scope `backups`): take one, the list with each backup's state kept up to date, delete,
 * restore the cluster from a complete one after typing its id, following the restore until it ends (also one that
 * was already running when the page opened, or ended within the hour), and the backup schedule.
 */
export const clusterBackupsPage = clusterTabPage({
  segment: "backups",
  title: "Backups",
  render(tab) {
    const take = h("button", { type: "button" }, "Take a backup");
    const progress = h("div", {});
    const list = h("div", {}, h("p", {}, "Loading the backups…"));
    const container = h(
      "div",
      {},
      h(
        "div",
        { class: "actions" },
        take,
        h(
          "p",
          { class: "hint" },
          "A backup copies every partition at one consistent cut while the cluster keeps working.",
        ),
      ),
      progress,
      list,
      backupScheduleCard(tab),
    );
    // Set while the last read failed (e.g. the cluster is down for a restore), so the next success clears its message.
    let loadFailed = false;
    const load = async (): Promise<void> => {
      try {
        const backups = await tab.context.api.backups(tab.clusterId);
        if (loadFailed) clearStatus(tab.status);
        loadFailed = false;
        refreshContent(
          list,
          backupTable(tab, backups, progress, () => void load()),
          JSON.stringify(backups),
        );
      } catch (error) {
        if (!sessionEnded(error)) {
          loadFailed = true;
          showStatus(tab.status, `The backups could not be loaded: ${(error as Error).message}`);
        }
        throw error;
      }
    };
    take.addEventListener("click", () => {
      void (async () => {
        clearStatus(tab.status);
        take.disabled = true;
        try {
          const backup = await tab.context.api.takeBackup(tab.clusterId);
          showStatus(tab.status, `Backup ${backup.uuid} was started.`, "success");
          await load().catch(() => undefined);
        } catch (error) {
          if (!sessionEnded(error)) showStatus(tab.status, `No backup was taken: ${(error as Error).message}`);
        } finally {
          take.disabled = false;
        }
      })();
    });
    repeatWhileShown(container, listPollMs, load);
    void showLatestRestore(tab, progress);
    return container;
  },
});

function backupTable(
  tab: ClusterTabContext,
  backups: readonly ClusterBackup[],
  progress: HTMLElement,
  onChanged: () => void,
): HTMLElement {
  if (backups.length === 0) return h("p", {}, "The cluster has no backups yet.");
  return table(
    "Backups of the cluster",
    ["Backup", "Status", "Created", "Completed", "Actions"],
    backups.map((backup) => [
      h("code", {}, backup.uuid),
      statusBadge(backup),
      instant(backup.created),
      instant(backup.completed),
      h(
        "div",
        { class: "row-actions" },
        backup.status === "Complete"
          ? h(
              "button",
              {
                type: "button",
                "aria-label": `Restore from backup ${backup.uuid}`,
                onclick: () => void restore(tab, backup, progress),
              },
              "Restore",
            )
          : null,
        h(
          "button",
          {
            type: "button",
            class: "danger",
            "aria-label": `Delete backup ${backup.uuid}`,
            onclick: () => void deleteBackup(tab, backup, onChanged),
          },
          "Delete",
        ),
      ),
    ]),
  );
}

async function deleteBackup(tab: ClusterTabContext, backup: ClusterBackup, onDeleted: () => void): Promise<void> {
  const confirmed = await confirmAction({
    title: "Delete backup",
    message: `Backup ${backup.uuid} is removed from the cluster's backup store; the cluster can no longer be restored from it.`,
    confirmLabel: "Delete backup",
  });
  if (!confirmed) return;
  clearStatus(tab.status);
  try {
    await tab.context.api.deleteBackup(tab.clusterId, backup.uuid);
    showStatus(tab.status, `Backup ${backup.uuid} was deleted.`, "success");
    onDeleted();
  } catch (error) {
    if (!sessionEnded(error)) {
      showStatus(tab.status, `Backup ${backup.uuid} could not be deleted: ${(error as Error).message}`);
    }
  }
}

/** Restores the cluster from a backup once its id was typed, and follows the restore until it ends. */
async function restore(tab: ClusterTabContext, backup: ClusterBackup, progress: HTMLElement): Promise<void> {
  const confirmed = await confirmAction({
    title: "Restore the cluster",
    message:
      `The cluster stops, every broker is restored from backup ${backup.uuid}, and it starts again. Everything ` +
      "written after the backup is lost; stop the applications that write to the cluster first.",
    confirmLabel: "Restore",
    typedConfirmation: backup.uuid,
  });
  if (!confirmed) return;
  clearStatus(tab.status);
  let started: ClusterRestore;
  try {
    started = await tab.context.api.restoreBackup(tab.clusterId, backup.uuid);
  } catch (error) {
    if (!sessionEnded(error)) showStatus(tab.status, `The restore was refused: ${(error as Error).message}`);
    return;
  }
  followRestore(tab, started, progress, true);
}

/**
 * Shows the cluster's latest restore when it still runs, so a restore started elsewhere or before the page was
 * reloaded is followed to its end too; and one that ended within the last hour, so its outcome is not missed.
 */
async function showLatestRestore(tab: ClusterTabContext, progress: HTMLElement): Promise<void> {
  try {
    const [latest] = await tab.context.api.restores(tab.clusterId);
    if (latest === undefined) return;
    const ended = latest.state === "COMPLETED" || latest.state === "FAILED";
    if (ended && Date.now() - Date.parse(latest.updated) > recentRestoreMs) return;
    if (progress.childElementCount === 0) followRestore(tab, latest, progress, false);
  } catch (error) {
    if (!sessionEnded(error)) showStatus(tab.status, `The restores could not be loaded: ${(error as Error).message}`);
  }
}

/** Shows a restore's progress in `progress` and reads its state until it is COMPLETED or FAILED. */
function followRestore(
  tab: ClusterTabContext,
  restore: ClusterRestore,
  progress: HTMLElement,
  takeFocus: boolean,
): void {
  let current = restore;
  const view = h("div", {});
  const headingId = uniqueId("restore-title");
  const heading = h("h2", { id: headingId, tabindex: -1 }, `Restore from backup ${restore.backupId}`);
  replaceChildren(progress, h("section", { class: "card", "aria-labelledby": headingId }, heading, view));
  if (takeFocus) heading.focus();
  const show = (restore: ClusterRestore): void =>
    refreshContent(view, restoreView(restore), `${restore.state}|${restore.failureReason ?? ""}`);
  show(current);
  repeatWhileShown(view, restorePollMs, async () => {
    if (current.state === "COMPLETED" || current.state === "FAILED") return;
    try {
      current = await tab.context.api.restoreState(tab.clusterId, current.backupId);
      show(current);
    } catch (error) {
      // The platform keeps the restore's state itself, so it answers while the cluster is down; the next read retries.
      if (!sessionEnded(error)) {
        showStatus(tab.status, `The restore's state could not be read: ${(error as Error).message}`);
      }
    }
  });
}

function restoreView(restore: ClusterRestore): HTMLElement {
  const reached = restoreSteps.findIndex((step) => step.state === restore.state);
  const failed = restore.state === "FAILED";
  const done = restore.state === "COMPLETED" ? restoreSteps.length : Math.max(0, reached);
  const progressId = uniqueId("restore-progress");
  return h(
    "div",
    {},
    h(
      "label",
      { for: progressId },
      failed
        ? "Restore failed"
        : restore.state === "COMPLETED"
          ? "Restore complete"
          : `Step ${done + 1} of ${restoreSteps.length}`,
    ),
    h("progress", { id: progressId, max: restoreSteps.length, value: failed ? 0 : done }),
    h(
      "ol",
      { class: "operations" },
      restoreSteps.map((step, index) =>
        h(
          "li",
          { class: index < done ? "done" : index === reached && !failed ? "running" : undefined },
          step.label,
          index < done ? " (done)" : index === reached && !failed ? " (running)" : "",
        ),
      ),
    ),
    failed
      ? h(
          "p",
          { class: "problem", role: "alert" },
          `The restore failed: ${restore.failureReason ?? "no reason given"}. The cluster runs on its previous data.`,
        )
      : restore.state === "COMPLETED"
        ? h("p", { class: "finding ok" }, `The cluster was restored from backup ${restore.backupId} and runs again.`)
        : null,
  );
}
