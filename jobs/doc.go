// Package jobs names idemgate's River jobs, so that they share a database
// with a team's own River client without either taking the other's jobs.
//
// idemgate's jobs go to their own queues (Queue for the tools' jobs and
// approval notices, MaintenanceQueue for the reaper and the pruner), and
// every kind starts with KindPrefix (Kind). idemgate's worker fetches
// only those queues, so a team's client on River's default queue runs
// beside it unchanged: nothing else is needed.
//
// To run idemgate's jobs inside the team's own client instead, Configure
// the team's river.Config with the Service (a Source) before
// river.NewClient, and run the api alone (ServeAPI, or ServeHTTP without
// Run). Both modes may overlap: River's locking gives each job to one
// client, whichever fetched it.
package jobs
