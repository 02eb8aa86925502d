// Clients name tasks, errors and snapshots from the protocol module; one import gives them all.
@_exported import SkyProtocol
