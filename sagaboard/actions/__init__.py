"""What people do to sagas and steps: stop, retry, force-resolve, leave; the work queues;
the runner that carries the rollbacks out."""
