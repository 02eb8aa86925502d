// What a client names, and nothing else: tasks and coders, job ids and states, the cluster's
// snapshots and events from the protocol module, the `ScanSystem` of its local fallback and the
// `TaskContext` its handlers may take, and the CURVE key types its credentials are made of. The
// wire types stay public in their modules, for speed, but `import Sky` does not bring them
// (docs/architecture.md, "What is public").
@_exported import struct SkyProtocol.BatchCounts
@_exported import struct SkyProtocol.BrokerCounters
@_exported import struct SkyProtocol.BrokerStats
@_exported import struct SkyProtocol.BulkAction
@_exported import struct SkyProtocol.BulkOutcome
@_exported import struct SkyProtocol.ClusterSnapshot
@_exported import struct SkyProtocol.CronExpression
@_exported import enum SkyProtocol.DisconnectReason
@_exported import struct SkyProtocol.EventKind
@_exported import protocol SkyProtocol.FlowBatchTask
@_exported import protocol SkyProtocol.FlowResultsTask
@_exported import struct SkyProtocol.FlowSpec
@_exported import struct SkyProtocol.FlowStatus
@_exported import struct SkyProtocol.JSONTaskCoder
@_exported import struct SkyProtocol.JobCounts
@_exported import struct SkyProtocol.JobDetails
@_exported import struct SkyProtocol.JobFilter
@_exported import struct SkyProtocol.JobID
@_exported import enum SkyProtocol.JobState
@_exported import struct SkyProtocol.KeyListing
@_exported import struct SkyProtocol.KeyScope
@_exported import struct SkyProtocol.KeyState
@_exported import struct SkyProtocol.ProcessMemory
@_exported import struct SkyProtocol.PropertyListTaskCoder
@_exported import struct SkyProtocol.RateLimit
@_exported import struct SkyProtocol.RateLimitState
@_exported import struct SkyProtocol.ScheduleCounts
@_exported import struct SkyProtocol.ScheduleListing
@_exported import struct SkyProtocol.ScheduleSpec
@_exported import struct SkyProtocol.ScheduleTick
@_exported import struct SkyProtocol.ServiceState
@_exported import struct SkyProtocol.ServiceStats
@_exported import struct SkyProtocol.SkyEvent
@_exported import protocol SkyProtocol.SkyTask
@_exported import protocol SkyProtocol.TaskCoder
@_exported import struct SkyProtocol.TaskFailure
@_exported import struct SkyProtocol.TaskInfo
@_exported import struct SkyProtocol.WorkerInfo
@_exported import class SkyTasks.ScanSystem
@_exported import struct SkyTasks.TaskContext
@_exported import struct SkyZMQ.CurveCredentials
@_exported import struct SkyZMQ.CurveKey
@_exported import enum SkyZMQ.CurveKeyError
@_exported import enum SkyZMQ.CurveKeyFile
@_exported import struct SkyZMQ.CurveKeyPair
