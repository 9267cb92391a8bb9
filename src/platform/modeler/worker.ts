/** Entry of the platform's worker threads: serves the Modeler's CPU-heavy tasks (see `worker-tasks.ts`). */
import { serveTasks } from "../worker-pool.js";
import { modelerWorkerTasks } from "./worker-tasks.js";

serveTasks(modelerWorkerTasks);
