import { randomUUID } from "node:crypto";
import { MemberService } from "../../../src/platform/admin/members/service.js";
import type { Person } from "../../../src/platform/modeler/records.js";
import { createModelerServices, type ModelerServices } from "../../../src/platform/modeler/services.js";
import { openStore, type Store } from "../../../src/platform/store/database.js";
import { createTestDatabase, type TestDatabase } from "../../support/databases.js";

/** A migrated database of one kind with two organizations and the Modeler services over it. */
export interface ModelerFixture {
  store: Store;
  services: ModelerServices;
  organizationId: string;
  otherOrganizationId: string;
  actor: Person;
  /** Moves the services' clock forward. */
  advanceClock(durationMs: number): void;
  close(): Promise<void>;
}

/** A BPMN document with one process, whose name makes it distinguishable. */
export function bpmnDocument(processName = "Order"): string {
  return `<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="Definitions_1" targetNamespace="http://bpmn.io/schema/bpmn">
  <bpmn:process id="Process_1" name="${processName}" isExecutable="true">
    <bpmn:startEvent id="StartEvent_1" />
  </bpmn:process>
</bpmn:definitions>
`;
}

/** A DMN document with one decision. */
export function dmnDocument(): string {
  return `<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="https://www.omg.org/spec/DMN/20191111/MODEL/" id="Definitions_1" name="Decisions" namespace="https://example.com/decisions">
  <decision id="Decision_1" name="Dish" />
</definitions>
`;
}

/** Opens a fresh database of `kind` and builds the Modeler services over it, with a clock the test controls. */
export async function openModelerFixture(kind: "sqlite" | "postgres"): Promise<ModelerFixture> {
  const testDatabase: TestDatabase = await createTestDatabase(kind);
  const store = await openStore({ url: testDatabase.url, dataDirectory: testDatabase.dataDirectory });
  const organizationId = randomUUID();
  const otherOrganizationId = randomUUID();
  const timestamp = new Date(0).toISOString();
  await store.database
    .insertInto("organizations")
    .values([
      { id: organizationId, name: "one", created_at: timestamp },
      { id: otherOrganizationId, name: "two", created_at: timestamp },
    ])
    .execute();
  let nowMs = Date.parse("2024-03-14T12:00:00.000Z");
  const services = await createModelerServices({
    database: store.database,
    secrets: store.secrets,
    members: new MemberService(store.database),
    clients: { find: async () => undefined },
    baseUrl: "http://platform.test/modeler",
    clock: () => nowMs,
  });
  return {
    store,
    services,
    organizationId,
    otherOrganizationId,
    actor: { name: "Build pipeline", email: "pipeline@clients.invalid" },
    advanceClock(durationMs) {
      nowMs += durationMs;
    },
    async close() {
      await store.close();
      await testDatabase.drop();
    },
  };
}
