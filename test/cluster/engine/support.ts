import type { SlabStatistics } from "../../../src/cluster/engine/entry-slabs.js";

/** What `restoredEntryMemory()` and `EntrySlabs.statistics()` report once no restored entry is held any more. */
export const NO_RESTORED_ENTRY_MEMORY: SlabStatistics = {
  slabCount: 0,
  slabBytes: 0,
  handedOutBytes: 0,
  liveBytes: 0,
  keptPieceCount: 0,
  regionPieceCount: 0,
};
