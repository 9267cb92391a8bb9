import { sql } from "kysely";
import { openStore } from "../../../src/platform/store/database.js";
import { FileService } from "../../../src/platform/modeler/files/service.js";
const s2 = await openStore({ url: "", dataDirectory: "/tmp/diag-sqlite" });
const org = (await s2.database.selectFrom("modeler_files").select("organization_id").limit(1).executeTakeFirstOrThrow()).organization_id;
const variant = process.argv[2];
if (variant === "a") {
  await sql`create index if not exists modeler_files_organization_name_folded on modeler_files (organization_id, name_folded, id)`.execute(s2.database);
}
if (variant === "b") {
  await sql`drop index if exists modeler_files_organization_name`.execute(s2.database);
}
const files = new FileService(s2.database);
for (const body of [
  { filter: { name: "invoice 0042" }, sort: [{ field: "name", direction: "ASC" }], size: 20 },
  { filter: { name: "invoice" }, sort: [{ field: "name", direction: "ASC" }], size: 20 },
  { sort: [{ field: "name", direction: "ASC" }], size: 20 },
] as const) {
  for (let i = 0; i < 2; i++) {
    const t = performance.now();
    const r = await files.search(org, body as never);
    console.log(JSON.stringify(body), r.total, (performance.now() - t).toFixed(1), "ms");
  }
}
const plan = await sql`explain query plan select id from modeler_files where organization_id = ${org} and name_folded like ${"%invoice 0042%"} escape '\\' order by name asc, id asc limit 20`.execute(s2.database);
console.log(plan.rows.map((r) => (r as {detail: string}).detail));
const plan2 = await sql`explain query plan select count(*) from modeler_files where organization_id = ${org} and name_folded like ${"%invoice 0042%"} escape '\\'`.execute(s2.database);
console.log(plan2.rows.map((r) => (r as {detail: string}).detail));
await s2.close();
