import { CompiledQuery, type Kysely, type RawBuilder } from "kysely";

/** Stands for a value given on each execution of a `CompiledStatement`; compiled as an ordinary parameter. */
class StatementSlot {
  constructor(readonly name: string) {}
}

/**
 * A SQL statement compiled once for the database's dialect, then executed with fresh values for its slots.
 * Composing and compiling a statement of many `sql` fragments costs more than SQLite takes to run it (a profile of
 * the token endpoint measured about 20 µs per rate-limit upsert); hot paths compile once instead. The values still
 * travel as bound parameters, never as SQL text.
 */
export class CompiledStatement<Row, SlotName extends string> {
  private readonly database: Kysely<unknown>;
  private readonly sqlText: string;
  /** The compiled parameters in placeholder order: fixed values, or the slot whose value each execution gives. */
  private readonly parameters: readonly unknown[];

  /**
   * Compiles the statement `build` makes; `slot(name)` stands for a value given to `execute`. Values that are
   * not slots are fixed at compile time.
   */
  constructor(
    // biome-ignore lint/suspicious/noExplicitAny: the statement is raw SQL, so any schema's database can run it.
    database: Kysely<any>,
    build: (slot: (name: SlotName) => unknown) => RawBuilder<Row>,
  ) {
    const slots = new Map<string, StatementSlot>();
    const slot = (name: SlotName): unknown => {
      let found = slots.get(name);
      if (found === undefined) {
        found = new StatementSlot(name);
        slots.set(name, found);
      }
      return found;
    };
    const compiled = build(slot).compile(database);
    this.database = database;
    this.sqlText = compiled.sql;
    this.parameters = [...compiled.parameters];
    const used = new Set(this.parameters.filter((value) => value instanceof StatementSlot).map((value) => value.name));
    const unused = [...slots.keys()].filter((name) => !used.has(name));
    if (unused.length > 0) throw new Error(`the compiled statement never uses its slots ${unused.join(", ")}`);
  }

  /** Runs the statement with `values` in its slots and answers the rows it returned. */
  async execute(values: Readonly<Record<SlotName, unknown>>): Promise<Row[]> {
    const parameters = this.parameters.map((value) =>
      value instanceof StatementSlot ? values[value.name as SlotName] : value,
    );
    const result = await this.database.executeQuery<Row>(CompiledQuery.raw(this.sqlText, parameters));
    return result.rows;
  }
}
