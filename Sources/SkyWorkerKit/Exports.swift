// What a worker names, and nothing else: its tasks and their coders (a flow's completion steps'
// too), the `ScanSystem` that hosts its handlers and the `TaskContext` they may take, and the
// CURVE key types. The wire types stay public in their modules for speed, but
// `import SkyWorkerKit` does not bring them (docs/architecture.md, "What is public").
@_exported import struct SkyProtocol.BatchCounts
@_exported import protocol SkyProtocol.FlowBatchTask
@_exported import protocol SkyProtocol.FlowResultsTask
@_exported import struct SkyProtocol.JSONTaskCoder
@_exported import struct SkyProtocol.PropertyListTaskCoder
@_exported import protocol SkyProtocol.SkyTask
@_exported import protocol SkyProtocol.TaskCoder
@_exported import class SkyTasks.ScanSystem
@_exported import struct SkyTasks.TaskContext
@_exported import struct SkyZMQ.CurveCredentials
@_exported import struct SkyZMQ.CurveKey
@_exported import enum SkyZMQ.CurveKeyError
@_exported import enum SkyZMQ.CurveKeyFile
@_exported import struct SkyZMQ.CurveKeyPair
