/**
 * Group commit: many concurrent writes, one durable transaction.
 *
 * Writers submit operations; at most one transaction is in flight at a time. Every operation submitted while a
 * transaction is being committed waits and then goes, together with all the others that arrived meanwhile, into the
 * next transaction. Under load the batch therefore grows to whatever arrives during one durable commit, which is
 * exactly the classic group-commit behaviour, and with no load an operation is committed immediately. An operation
 * is resolved only after the transaction that contains it has committed durably (the transaction runner is
 * responsible for that guarantee); if the transaction fails, every operation in it is rejected and the committer
 * refuses all later work, because the in-memory view can no longer be trusted to match the disk.
 */

/** Runs `work` inside one transaction and resolves once that transaction is durable. */
export type TransactionRunner = (work: () => void) => Promise<void>;

/** Limits that keep the queue and each transaction bounded. */
export interface GroupCommitOptions {
  /** Most operations one transaction may contain; the rest wait for the next one. */
  readonly maxOperationsPerTransaction: number;
  /** Most operations that may wait; submitting beyond this is an error the caller must not provoke. */
  readonly maxPendingOperations: number;
}

/** Default limits: large enough not to matter for a Raft driver with bounded in-flight proposals. */
export const defaultGroupCommitOptions: GroupCommitOptions = {
  maxOperationsPerTransaction: 4096,
  maxPendingOperations: 65_536,
};

interface PendingOperation {
  readonly write: () => void;
  readonly resolve: () => void;
  readonly reject: (error: Error) => void;
  /** Set when the operation's own precondition check refused it inside the transaction. */
  refusal?: Error;
}

/** Coalesces submitted write operations into as few durable transactions as possible. */
export class GroupCommitter {
  private readonly pending: PendingOperation[] = [];
  private committing = false;
  private failure: Error | null = null;
  private transactionsCommitted = 0;
  private operationsCommitted = 0;
  private idleWaiters: (() => void)[] = [];

  constructor(
    private readonly runTransaction: TransactionRunner,
    private readonly options: GroupCommitOptions = defaultGroupCommitOptions,
    /** Called once after each durable transaction, before its operations are resolved. */
    private readonly afterCommit: () => void = () => {},
    /** Called once when a transaction fails, before its operations are rejected. */
    private readonly afterFailure: () => void = () => {},
  ) {
    if (options.maxOperationsPerTransaction < 1 || options.maxPendingOperations < 1) {
      throw new Error("invariant violated: group commit limits must be at least 1");
    }
  }

  /** Why a transaction failed, after which every write is refused; null while none has. */
  get failureCause(): Error | null {
    return this.failure;
  }

  /** Number of durable transactions committed so far. */
  get transactionCount(): number {
    return this.transactionsCommitted;
  }

  /** Number of operations committed so far. */
  get operationCount(): number {
    return this.operationsCommitted;
  }

  /**
   * Queues `write` to run inside the next transaction (in submission order) and resolves once that transaction is
   * durable. `write` runs synchronously inside the transaction. It must check its preconditions before writing
   * anything: if it throws, only its own promise is rejected and the other operations of the batch still commit.
   */
  submit(write: () => void): Promise<void> {
    if (this.failure !== null) {
      return Promise.reject(new Error(`storage failed earlier and accepts no writes: ${this.failure.message}`));
    }
    if (this.pending.length >= this.options.maxPendingOperations) {
      return Promise.reject(
        new Error(`group commit queue is full (${this.options.maxPendingOperations} operations are waiting)`),
      );
    }
    const promise = new Promise<void>((resolve, reject) => {
      this.pending.push({ write, resolve, reject });
    });
    this.startNextTransaction();
    return promise;
  }

  /** Resolves once nothing is pending or in flight. */
  whenIdle(): Promise<void> {
    if (!this.committing && this.pending.length === 0) {
      return Promise.resolve();
    }
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private startNextTransaction(): void {
    if (this.committing || this.pending.length === 0) {
      return;
    }
    this.committing = true;
    let batch: PendingOperation[] = [];
    // The batch is taken when the transaction actually starts rather than now, so every operation submitted until
    // the writer thread is ready joins this transaction.
    const work = (): void => {
      batch = this.pending.splice(0, this.options.maxOperationsPerTransaction);
      for (const operation of batch) {
        try {
          operation.write();
        } catch (error) {
          operation.refusal = error instanceof Error ? error : new Error(String(error));
        }
      }
    };
    this.runTransaction(work).then(
      () => {
        this.transactionsCommitted += 1;
        this.operationsCommitted += batch.length;
        this.afterCommit();
        for (const operation of batch) {
          if (operation.refusal === undefined) {
            operation.resolve();
          } else {
            operation.reject(operation.refusal);
          }
        }
        this.committing = false;
        this.startNextTransaction();
        this.notifyIdle();
      },
      (error: unknown) => {
        const failure = error instanceof Error ? error : new Error(String(error));
        this.failure = failure;
        this.afterFailure();
        const abandoned = [...batch, ...this.pending.splice(0)];
        for (const operation of abandoned) {
          operation.reject(failure);
        }
        this.committing = false;
        this.notifyIdle();
      },
    );
  }

  private notifyIdle(): void {
    if (this.committing || this.pending.length > 0) {
      return;
    }
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const waiter of waiters) {
      waiter();
    }
  }
}
