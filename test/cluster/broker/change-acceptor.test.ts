/**
 * A broker's acceptor of new changes: what it promised and accepted is on disk, owner-only, before it answers, so a
 * restarted broker keeps its word; a damaged file stops the broker rather than let it forget; and the two requests
 * travel between brokers checked like every other.
 */
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ChangeAcceptor } from "../../../src/cluster/broker/change-acceptor.js";
import {
  CHANGE_ACCEPTANCE_FILE_NAME,
  DamagedBrokerFileError,
  readChangeAcceptance,
} from "../../../src/cluster/broker/files.js";
import { parseAcceptAnswer, parsePeerRequest, parsePrepareAnswer } from "../../../src/cluster/broker/peer-requests.js";
import {
  encodeConfiguration,
  initialConfiguration,
  roundRobinDistribution,
  startChange,
} from "../../../src/cluster/topology/index.js";
import { modeOf } from "../../support/file-modes.js";
import { removeDirectory, temporaryDirectory } from "./support.js";

const directories: string[] = [];

/** A configuration of `version` recording a new change (what a coordinator proposes for that version). */
function changeAt(version: number): string {
  const base = initialConfiguration({
    clusterSize: 3,
    partitionCount: 1,
    replicationFactor: 1,
    distribution: roundRobinDistribution([0, 1, 2], 1, 1),
    nowIso: "2026-11-30T00:00:00.000Z",
  });
  const plan = [{ operation: "BROKER_ADD" as const, brokerId: 3, brokers: [] }];
  return encodeConfiguration(startChange({ ...base, version: version - 1 }, plan, "2026-11-30T00:00:00.000Z"));
}

const recorded = changeAt(5);

async function dataDirectory(): Promise<string> {
  const directory = await temporaryDirectory("flowplane-acceptor-");
  directories.push(directory);
  return directory;
}

afterEach(async () => {
  await Promise.all(directories.splice(0).map(removeDirectory));
});

describe("ChangeAcceptor", () => {
  it("keeps its promise and acceptance across a restart", async () => {
    const directory = await dataDirectory();
    const acceptor = new ChangeAcceptor(directory, await readChangeAcceptance(directory), () => 4);
    expect(await acceptor.prepare(5, { round: 2, brokerId: 1 })).toEqual({ outcome: "promised", accepted: null });
    expect(await acceptor.accept(5, { round: 2, brokerId: 1 }, recorded)).toEqual({ outcome: "accepted" });
    // What no coordinator proposes for version 5 is refused before it is accepted (it could never be recorded).
    await expect(acceptor.accept(5, { round: 2, brokerId: 1 }, changeAt(6))).rejects.toThrow(/of version 6, not 5/);
    await expect(acceptor.accept(5, { round: 2, brokerId: 1 }, "{")).rejects.toThrow(/change acceptance/);
    expect(modeOf(join(directory, CHANGE_ACCEPTANCE_FILE_NAME))).toBe(0o600);

    // The restarted broker refuses a lower ballot and hands the accepted change to a higher one.
    const restarted = new ChangeAcceptor(directory, await readChangeAcceptance(directory), () => 4);
    expect(await restarted.prepare(5, { round: 1, brokerId: 2 })).toEqual({
      outcome: "rejected",
      promised: { round: 2, brokerId: 1 },
    });
    expect(await restarted.prepare(5, { round: 3, brokerId: 0 })).toEqual({
      outcome: "promised",
      accepted: { ballot: { round: 2, brokerId: 1 }, configuration: recorded },
    });
  });

  it("answers requests one at a time, each on the state the one before left", async () => {
    const directory = await dataDirectory();
    const acceptor = new ChangeAcceptor(directory, null, () => 4);
    // Sent together, the second prepare must see the first's promise, as if they had come one after the other.
    const [first, second] = await Promise.all([
      acceptor.prepare(5, { round: 1, brokerId: 0 }),
      acceptor.prepare(5, { round: 1, brokerId: 0 }),
    ]);
    expect(first.outcome).toBe("promised");
    expect(second).toEqual({ outcome: "rejected", promised: { round: 1, brokerId: 0 } });
  });

  it("abstains, across a restart, for the version a broker that lost its data may have promised before", async () => {
    const directory = await dataDirectory();
    const acceptor = new ChangeAcceptor(directory, null, () => 4);
    await acceptor.abstain(5);
    const restarted = new ChangeAcceptor(directory, await readChangeAcceptance(directory), () => 4);
    expect(await restarted.prepare(5, { round: 7, brokerId: 1 })).toEqual({ outcome: "abstaining" });
    expect(await restarted.accept(5, { round: 7, brokerId: 1 }, recorded)).toEqual({ outcome: "abstaining" });
    // The next version is decided as usual.
    const later = new ChangeAcceptor(directory, await readChangeAcceptance(directory), () => 5);
    expect(await later.prepare(6, { round: 1, brokerId: 1 })).toEqual({ outcome: "promised", accepted: null });
  });

  it("refuses to start on a damaged file instead of forgetting what it promised", async () => {
    const directory = await dataDirectory();
    await writeFile(join(directory, CHANGE_ACCEPTANCE_FILE_NAME), '{"version":5,"promised":{"round":0}}');
    await expect(readChangeAcceptance(directory)).rejects.toThrow(DamagedBrokerFileError);
    await writeFile(join(directory, CHANGE_ACCEPTANCE_FILE_NAME), "{");
    await expect(readChangeAcceptance(directory)).rejects.toThrow(/is damaged \(not JSON\)/);
    // An accepted value that no coordinator could have proposed for its version is damage too.
    const wrongVersion = {
      version: 5,
      promised: { round: 1, brokerId: 0 },
      accepted: { ballot: { round: 1, brokerId: 0 }, configuration: changeAt(6) },
    };
    await writeFile(join(directory, CHANGE_ACCEPTANCE_FILE_NAME), JSON.stringify(wrongVersion));
    await expect(readChangeAcceptance(directory)).rejects.toThrow(/accepted: the configuration is of version 6, not 5/);
    expect(await readChangeAcceptance(await dataDirectory())).toBeNull();
  });
});

describe("the acceptance requests between brokers", () => {
  it("are parsed and checked", () => {
    const ballot = { round: 1, brokerId: 2 };
    expect(parsePeerRequest({ type: "change-prepare", version: 3, ballot })).toEqual({
      type: "change-prepare",
      version: 3,
      ballot,
    });
    const configuration = changeAt(3);
    expect(parsePeerRequest({ type: "change-accept", version: 3, ballot, configuration })).toEqual({
      type: "change-accept",
      version: 3,
      ballot,
      configuration,
    });
    // A value no coordinator proposes for the version: malformed, another version's, or one that records no change.
    expect(parsePeerRequest({ type: "change-accept", version: 3, ballot, configuration: "{}" })).toMatch(
      /^change-accept: /,
    );
    expect(parsePeerRequest({ type: "change-accept", version: 4, ballot, configuration })).toBe(
      "change-accept: the configuration is of version 3, not 4",
    );
    // Rounds are bounded, so that one absurd round cannot leave no valid round above it.
    expect(parsePeerRequest({ type: "change-prepare", version: 3, ballot: { round: 2 ** 31, brokerId: 1 } })).toMatch(
      /round must be an integer from 1 to 2147483647/,
    );
    expect(parsePeerRequest({ type: "change-prepare", version: 1, ballot })).toBe("change-prepare needs a version ≥ 2");
    expect(parsePeerRequest({ type: "change-prepare", version: 3, ballot: { round: 1 } })).toMatch(/brokerId/);
    expect(parsePeerRequest({ type: "change-accept", version: 3, ballot })).toBe(
      "change-accept needs the configuration it records",
    );
  });

  it("have their answers checked, a malformed one counting as no answer", () => {
    const accepted = { ballot: { round: 1, brokerId: 0 }, configuration: changeAt(5) };
    expect(parsePrepareAnswer({ outcome: "promised", accepted }, 5)).toEqual({ outcome: "promised", accepted });
    // An acceptance no coordinator could have proposed for the version (a broker from before the checks took any
    // value): adopting it would stop every later change, so it counts as no answer.
    expect(parsePrepareAnswer({ outcome: "promised", accepted }, 6)).toBeNull();
    expect(
      parsePrepareAnswer({ outcome: "promised", accepted: { ...accepted, configuration: "garbage" } }, 5),
    ).toBeNull();
    expect(parsePrepareAnswer({ outcome: "promised", accepted: null }, 5)).toEqual({
      outcome: "promised",
      accepted: null,
    });
    expect(parsePrepareAnswer({ outcome: "promised" }, 5)).toBeNull();
    expect(parsePrepareAnswer({ outcome: "rejected", promised: { round: -1, brokerId: 0 } }, 5)).toBeNull();
    expect(parseAcceptAnswer({ outcome: "behind" })).toEqual({ outcome: "behind" });
    expect(parseAcceptAnswer({ outcome: "accepted", extra: 1 })).toEqual({ outcome: "accepted" });
    expect(parseAcceptAnswer({ outcome: "unknown" })).toBeNull();
    // A broker of an earlier version answers an error, which the caller turns into no answer too.
    expect(parseAcceptAnswer("malformed peer request")).toBeNull();
  });
});
