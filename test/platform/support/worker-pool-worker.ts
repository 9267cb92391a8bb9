/** The worker module of the worker pool's tests. */
import { serveTasks } from "../../../src/platform/worker-pool.js";
import { testTasks } from "./worker-pool-tasks.js";

serveTasks(testTasks);
