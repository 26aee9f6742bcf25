// Package jobs names idemgate's River jobs, so that they share a database
// with a team's own River client without either taking the other's jobs.
//
// idemgate's jobs go to their own queues (Queue for the tools' jobs and
// approval notices, MaintenanceQueue for the reaper and the pruner), and
// every kind starts with KindPrefix (Kind). idemgate's worker fetches
// only those queues.
//
// Beside: idemgate's worker and the team's client, each on its own queues,
// work their own jobs; nothing else is needed for that. River elects one
// leader per database schema, though, and its leader-only services follow
// the leader's configuration: only the leader's periodic jobs are
// enqueued, and its rescuer discards stuck jobs of kinds it does not know.
// A team whose periodic jobs or rescued jobs matter runs idemgate's jobs
// inside its client.
//
// Inside: Configure the team's river.Config with the Service (a Source)
// before river.NewClient, in every process of the team that runs the
// client, and serve the api alone (ServeAPI, or ServeHTTP without Run);
// idemgate's own worker (RunWorker, Run) does not run, so that every
// leader candidate knows every kind and every periodic job.
package jobs
