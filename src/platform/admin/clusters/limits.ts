/**
 * The bounds of a scale request to the Administration API, apart from the service that enforces them so that the
 * command line can check its options against them without loading the platform.
 */

/** Most brokers a cluster may be scaled to: each one is a process the provisioner runs. */
export const MAX_BROKERS_PER_CLUSTER = 32;

/** Most partitions a change may ask for. */
export const MAX_PARTITIONS = 1_000;
