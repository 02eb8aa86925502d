/// Commands a client sends to the broker (signature "SKYC01").
public enum ClientToBroker: Sendable, Equatable {
    /// `[SKYC01][0x01][request-id][service][header][body]([trace])`: run a task. The trace
    /// frame goes only to a broker whose `mmi.features` names ``TraceContext/feature``.
    case request(TaskRequest)
    /// `[SKYC01][0x03][request-id]`: the caller no longer wants this request.
    case cancel(RequestID)

    public enum Command: UInt8 {
        case request = 0x01
        case cancel = 0x03
    }

    public static func decode(_ frames: [[UInt8]]) throws(ProtocolError) -> ClientToBroker {
        let byte = try WireFormat.command(of: frames, signature: WireFormat.clientSignature)
        guard let command = Command(rawValue: byte) else { throw .unknownCommand(byte) }
        switch command {
        case .request:
            guard frames.count == 6 || frames.count == 7 else {
                throw .wrongFrameCount(command: "REQUEST", expected: "6 or 7", actual: frames.count)
            }
            let request = TaskRequest(
                requestID: try RequestID(frame: frames[2]),
                service: try WireFormat.name(frames[3]),
                header: try RequestHeader(frame: frames[4]),
                body: frames[5],
                trace: frames.count == 7 ? try WireFormat.traceFrame(frames[6]) : nil)
            // 0 names the answer to a CANCEL; a request's attempts count from 1.
            guard request.header.attempt >= 1 else {
                throw .invalidValue(name: "attempt", reason: "0; attempts count from 1")
            }
            return .request(request)
        case .cancel:
            try WireFormat.expectFrames(frames, 3, command: "CANCEL")
            return .cancel(try RequestID(frame: frames[2]))
        }
    }

    public func encode() -> [[UInt8]] {
        switch self {
        case .request(let request):
            // Once per call: one array of the right size, the command frame shared.
            var frames: [[UInt8]] = []
            frames.reserveCapacity(7)
            frames.append(WireFormat.clientSignature)
            frames.append(WireFormat.byteFrame(Command.request.rawValue))
            frames.append(request.requestID.frame)
            frames.append(Array(request.service.utf8))
            frames.append(request.header.frame)
            frames.append(request.body)
            if let trace = request.trace { frames.append(trace) }
            return frames
        case .cancel(let requestID):
            return [WireFormat.clientSignature, [Command.cancel.rawValue], requestID.frame]
        }
    }
}

/// Commands the broker sends to a client (signature "SKYC01").
public enum BrokerToClient: Sendable, Equatable {
    /// `[SKYC01][0x02][request-id][attempt][status][body]`: the one reply to a request.
    case reply(TaskReply)

    public enum Command: UInt8 {
        case reply = 0x02
    }

    public static func decode(_ frames: [[UInt8]]) throws(ProtocolError) -> BrokerToClient {
        let byte = try WireFormat.command(of: frames, signature: WireFormat.clientSignature)
        guard let command = Command(rawValue: byte) else { throw .unknownCommand(byte) }
        switch command {
        case .reply:
            try WireFormat.expectFrames(frames, 6, command: "REPLY")
            return .reply(
                TaskReply(
                    requestID: try RequestID(frame: frames[2]),
                    attempt: try WireFormat.uint32(frames[3], name: "attempt"),
                    status: try ReplyStatus(frame: frames[4]),
                    body: frames[5]))
        }
    }

    public func encode() -> [[UInt8]] { encode(routedTo: nil) }

    /// The frames, after a ROUTER's routing-id frame when one is given: the broker's sends are
    /// built in one array of the right size.
    public func encode(routedTo routingID: [UInt8]?) -> [[UInt8]] {
        switch self {
        case .reply(let reply):
            var frames: [[UInt8]] = []
            frames.reserveCapacity(7)
            if let routingID { frames.append(routingID) }
            frames.append(WireFormat.clientSignature)
            frames.append(WireFormat.byteFrame(Command.reply.rawValue))
            frames.append(reply.requestID.frame)
            frames.append(WireFormat.bytes(reply.attempt))
            frames.append(WireFormat.byteFrame(reply.status.rawValue))
            frames.append(reply.body)
            return frames
        }
    }
}
