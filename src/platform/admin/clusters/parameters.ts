/**
 * What a cluster can be created with (`GET /clusters/parameters`): plan types (the initial shape), channels with
 * their generations (the flowplane version the cluster's processes run) and regions (where a provisioner runs it).
 * Ids are fixed UUIDs, so a script that stored one keeps working across restarts and installations.
 */
import { createHash } from "node:crypto";
import type { ClusterShape } from "../../provisioner/provisioner.js";
import { platformVersion } from "../../version.js";

/** A plan type: a named initial shape. */
export interface PlanType {
  readonly uuid: string;
  readonly name: string;
  readonly shape: ClusterShape;
}

/** The plan types, smallest first. */
export const planTypes: readonly PlanType[] = [
  {
    uuid: "6f1e9a52-3b1d-4c3e-9a55-1f0d2c7b8e01",
    name: "Development (1 broker, 1 partition, replication factor 1)",
    shape: { brokers: 1, partitions: 1, replicationFactor: 1 },
  },
  {
    uuid: "6f1e9a52-3b1d-4c3e-9a55-1f0d2c7b8e03",
    name: "Standard (3 brokers, 3 partitions, replication factor 3)",
    shape: { brokers: 3, partitions: 3, replicationFactor: 3 },
  },
  {
    uuid: "6f1e9a52-3b1d-4c3e-9a55-1f0d2c7b8e05",
    name: "Large (5 brokers, 5 partitions, replication factor 3)",
    shape: { brokers: 5, partitions: 5, replicationFactor: 3 },
  },
];

/** The plan of the cluster `flowplane start` runs first: the 3/3/3 shape. */
export const defaultPlanType = planTypes[1] as PlanType;

/** A region: where a provisioner runs clusters. */
export interface Region {
  readonly uuid: string;
  readonly name: string;
}

/** The built-in provisioner's region: child processes on the platform's machine. */
export const localRegion: Region = { uuid: "0b8d6a3e-5c2f-4f6a-8e1b-7c9d0a1b2c3d", name: "local" };

/** A generation: one flowplane version that a cluster's processes run. */
export interface Generation {
  readonly uuid: string;
  readonly name: string;
}

/** A stable UUID for a name (RFC 9562 version 5 layout over SHA-1), so one version always has one generation id. */
function nameBasedUuid(name: string): string {
  const bytes = createHash("sha1").update(`flowplane-generation:${name}`).digest().subarray(0, 16);
  bytes[6] = ((bytes[6] as number) & 0x0f) | 0x50;
  bytes[8] = ((bytes[8] as number) & 0x3f) | 0x80;
  const hex = bytes.toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The generation of a flowplane version. */
export function generationOf(version: string): Generation {
  return { uuid: nameBasedUuid(version), name: `flowplane ${version}` };
}

/** The generation of this installation: the one its processes run. */
export const currentGeneration: Generation = generationOf(platformVersion);

/** A channel: a line of generations; a cluster follows its channel's default generation when upgraded. */
export interface Channel {
  readonly uuid: string;
  readonly name: string;
  readonly defaultGeneration: Generation;
  readonly allowedGenerations: readonly Generation[];
}

/** The one channel: the installed flowplane version (a self-hosted installation runs one version at a time). */
export const stableChannel: Channel = {
  uuid: "3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f",
  name: "Stable",
  defaultGeneration: currentGeneration,
  allowedGenerations: [currentGeneration],
};

/** Every channel. */
export const channels: readonly Channel[] = [stableChannel];

/** Every region (one per provisioner the platform runs). */
export const regions: readonly Region[] = [localRegion];

/** The body of `GET /clusters/parameters`. */
export interface ClusterParameters {
  channels: {
    uuid: string;
    name: string;
    defaultGeneration: Generation;
    allowedGenerations: Generation[];
  }[];
  clusterPlanTypes: { uuid: string; name: string }[];
  regions: { uuid: string; name: string }[];
}

/** The parameters as the API answers them. */
export function clusterParameters(): ClusterParameters {
  return {
    channels: channels.map((channel) => ({
      uuid: channel.uuid,
      name: channel.name,
      defaultGeneration: { ...channel.defaultGeneration },
      allowedGenerations: channel.allowedGenerations.map((generation) => ({ ...generation })),
    })),
    clusterPlanTypes: planTypes.map((plan) => ({ uuid: plan.uuid, name: plan.name })),
    regions: regions.map((region) => ({ uuid: region.uuid, name: region.name })),
  };
}
