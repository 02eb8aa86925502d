// Workers declare their tasks with `SkyTask`; one import gives them everything.
@_exported import SkyProtocol
@_exported import SkyTasks

@_exported import struct SkyZMQ.CurveCredentials
@_exported import struct SkyZMQ.CurveKey
@_exported import enum SkyZMQ.CurveKeyError
@_exported import enum SkyZMQ.CurveKeyFile
@_exported import struct SkyZMQ.CurveKeyPair
