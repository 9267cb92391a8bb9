import { randomUUID } from "node:crypto";
import { sql } from "kysely";
import { openStore } from "../../../src/platform/store/database.js";
import { seed } from "../../../bench/modeler/index.js";
import { FileService } from "../../../src/platform/modeler/files/service.js";
const dir = "/tmp/diag-sqlite";
const store = await openStore({ url: "", dataDirectory: dir });
const org = randomUUID();
await store.database.insertInto("organizations").values({ id: org, name: "x", created_at: new Date().toISOString() }).execute();
await store.close();
const projectId = await seed("", dir, org);
const s2 = await openStore({ url: "", dataDirectory: dir });
const files = new FileService(s2.database);
for (const body of [
  { filter: { name: "invoice 0042" }, sort: [{ field: "name", direction: "ASC" }], size: 20 },
  { filter: { projectId, type: "bpmn" }, sort: [{ field: "updated", direction: "DESC" }], size: 20 },
  { filter: { updated: "2024-03-10T00:00:00Z||/M" }, sort: [{ field: "updated", direction: "DESC" }], page: 3, size: 50 },
] as const) {
  for (let i = 0; i < 2; i++) {
    const t = performance.now();
    const r = await files.search(org, body as never);
    console.log(JSON.stringify(body.filter), r.total, (performance.now() - t).toFixed(1), "ms");
  }
}
const plan = await sql`explain query plan select id from modeler_files where organization_id = ${org} and name_folded like ${"%invoice 0042%"} escape '\\' order by name asc, id asc limit 20`.execute(s2.database);
console.log(plan.rows);
const plan2 = await sql`explain query plan select count(*) from modeler_files where organization_id = ${org} and name_folded like ${"%invoice 0042%"} escape '\\'`.execute(s2.database);
console.log(plan2.rows);
await s2.close();
