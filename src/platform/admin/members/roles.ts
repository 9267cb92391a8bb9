/** Every member role of an organization. */
export const memberRoles = [
  "owner",
  "admin",
  "developer",
  "operationsengineer",
  "analyst",
  "taskuser",
  "visitor",
  "modeler",
] as const;

/** One member role. */
export type MemberRole = (typeof memberRoles)[number];

/** Roles that may be assigned through the API: all but `owner`, of which there is exactly one per organization. */
export const assignableRoles = memberRoles.filter((role) => role !== "owner") as Exclude<MemberRole, "owner">[];
