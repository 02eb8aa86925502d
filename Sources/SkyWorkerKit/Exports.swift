// Workers declare their tasks with `SkyTask`; one import gives them everything.
@_exported import SkyProtocol
