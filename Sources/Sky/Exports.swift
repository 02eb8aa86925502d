// Clients name tasks, errors and snapshots from the protocol module; one import gives them all.
@_exported import SkyProtocol
@_exported import SkyTasks

// And the CURVE key types a client's credentials are made of.
@_exported import struct SkyZMQ.CurveCredentials
@_exported import struct SkyZMQ.CurveKey
@_exported import enum SkyZMQ.CurveKeyError
@_exported import enum SkyZMQ.CurveKeyFile
@_exported import struct SkyZMQ.CurveKeyPair
