package enginesql

// The queues and kinds of idemgate's jobs in databases written by earlier
// releases: claim jobs and approval notices on River's default queue, a
// claim job's kind its tool's bare name; the reaper and the pruner on a
// queue named maintenance. Each engine's Migrate moves the unfinished
// ones to jobs.Queue and jobs.Kind (MoveLegacyJobs).
const (
	LegacyQueue              = "default" // River's QueueDefault
	LegacyMaintenanceQueue   = "maintenance"
	LegacyApprovalNoticeKind = "idemgate_approval_notice"
	LegacyReaperKind         = "idemgate_reaper"
	LegacyPrunerKind         = "idemgate_pruner"
)
