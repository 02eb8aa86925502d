// A worker of your own needs one import: the worker kit (tasks, coders, `ScanSystem`,
// `TaskContext`) and ArgumentParser (for `@OptionGroup var worker: WorkerOptions` in a
// command with flags of its own) come with it.
@_exported import ArgumentParser
@_exported import SkyWorkerKit
