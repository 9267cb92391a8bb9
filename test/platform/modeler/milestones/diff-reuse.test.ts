import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { DiffLinkSigner } from "../../../../src/platform/modeler/milestones/diff-links.js";
import { MilestoneService } from "../../../../src/platform/modeler/milestones/service.js";
import {
  type ModelerTaskRunner,
  type ModelerWorkerTasks,
  modelerWorkerTasks,
} from "../../../../src/platform/modeler/worker-tasks.js";
import { inlineTaskRunner, type TaskInput, type TaskResult } from "../../../../src/platform/worker-pool.js";
import { bpmnDocument, type ModelerFixture, openModelerFixture } from "../support.js";

type DiffInput = TaskInput<ModelerWorkerTasks, "diffMilestones">;

/**
 * A runner that computes on the calling thread and records the diffs it is asked for; with `held`, diffs wait
 * until `release` is called.
 */
function recordingRunner(options: { held?: boolean } = {}) {
  const inline = inlineTaskRunner(modelerWorkerTasks);
  let release: () => void = () => undefined;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  const diffsRequested: DiffInput[] = [];
  const runner: ModelerTaskRunner = {
    async run<Name extends keyof ModelerWorkerTasks & string>(
      name: Name,
      input: TaskInput<ModelerWorkerTasks, Name>,
    ): Promise<TaskResult<ModelerWorkerTasks, Name>> {
      if (name === "diffMilestones") {
        diffsRequested.push(input as DiffInput);
        if (options.held === true) await released;
      }
      return await inline.run(name, input);
    },
    assertCapacity() {
      inline.assertCapacity();
    },
  };
  return { runner, diffsRequested, release: () => release() };
}

describe("diffs through signed links", () => {
  let fixture: ModelerFixture;
  let fileId: string;

  beforeEach(async () => {
    fixture = await openModelerFixture("sqlite");
    const project = await fixture.services.projects.create(fixture.organizationId, fixture.actor, "P");
    fileId = (
      await fixture.services.files.create(fixture.organizationId, fixture.actor, {
        name: "order",
        content: bpmnDocument("first"),
        fileType: "bpmn",
        projectId: project.id,
      })
    ).id;
  });
  afterEach(async () => await fixture.close());

  async function service(runner: ModelerTaskRunner, diffMaxEditLength?: number): Promise<MilestoneService> {
    return new MilestoneService({
      database: fixture.store.database,
      diffLinks: await DiffLinkSigner.open(fixture.store.database, fixture.store.secrets, () =>
        Date.parse("2024-03-14T12:00:00.000Z"),
      ),
      baseUrl: "http://platform.test/modeler",
      tasks: runner,
      ...(diffMaxEditLength === undefined ? {} : { diffMaxEditLength }),
    });
  }

  /** Two milestones of the file, before and after `secondContent`, and a signed link between them. */
  async function link(milestones: MilestoneService, secondContent: string) {
    const first = await milestones.create(fixture.organizationId, fixture.actor, { name: "first", fileId });
    const revision = (await fixture.services.files.get(fixture.organizationId, fileId)).metadata.revision;
    await fixture.services.files.update(fixture.organizationId, fixture.actor, fileId, {
      revision,
      content: secondContent,
    });
    const second = await milestones.create(fixture.organizationId, fixture.actor, { name: "second", fileId });
    const url = new URL((await milestones.compare(fixture.organizationId, first.id, second.id)).url);
    return {
      first,
      second,
      grant: {
        organizationId: fixture.organizationId,
        fromMilestoneId: first.id,
        toMilestoneId: second.id,
        expiresAtMs: Number(url.searchParams.get("expires")),
      },
      signature: url.searchParams.get("signature") ?? "",
    };
  }

  it("serves a link's second request from the cache without computing the diff again", async () => {
    const { runner, diffsRequested } = recordingRunner();
    const milestones = await service(runner);
    const { grant, signature } = await link(milestones, bpmnDocument("second"));
    const first = await milestones.diff(grant, signature);
    expect(first).toContain('+  <bpmn:process id="Process_1" name="second" isExecutable="true">');
    expect(await milestones.diff(grant, signature)).toBe(first);
    expect(diffsRequested).toHaveLength(1);
    expect(milestones.diffCacheStatistics()).toMatchObject({ entries: 1, hits: 1 });
  });

  it("computes a diff once for requests that arrive while it is being computed", async () => {
    const { runner, diffsRequested, release } = recordingRunner({ held: true });
    const milestones = await service(runner);
    const { grant, signature } = await link(milestones, bpmnDocument("second"));
    const requests = Array.from({ length: 5 }, () => milestones.diff(grant, signature));
    // Let every request reach the point where it waits for the one computation.
    for (let turn = 0; turn < 20; turn++) await new Promise((resolve) => setImmediate(resolve));
    release();
    const answers = await Promise.all(requests);
    expect(new Set(answers).size).toBe(1);
    expect(diffsRequested).toHaveLength(1);
  });

  it("keeps a refusal, and computes the diff again after a milestone is renamed (its name is in the patch)", async () => {
    const { runner, diffsRequested } = recordingRunner();
    const milestones = await service(runner, 1);
    const { grant, signature, first } = await link(
      milestones,
      bpmnDocument("second").replace('id="StartEvent_1"', 'id="Start"'),
    );
    for (let attempt = 0; attempt < 3; attempt++) {
      await expect(milestones.diff(grant, signature)).rejects.toMatchObject({
        status: 409,
        message: expect.stringContaining("at most 1 changed lines"),
      });
    }
    expect(diffsRequested).toHaveLength(1);

    const lenient = await service(runner);
    const before = await lenient.diff(grant, signature);
    await lenient.rename(fixture.organizationId, fixture.actor, first.id, "renamed");
    const after = await lenient.diff(grant, signature);
    expect(before).toContain(`--- milestone first (${first.id})`);
    expect(after).toContain(`--- milestone renamed (${first.id})`);
    expect(diffsRequested).toHaveLength(3);
  });
});
