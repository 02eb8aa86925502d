import SkyProtocol

extension SkyClient {
    /// What the broker of this connection says of itself in `mmi.features`: asked once per
    /// connection (a reconnect may reach another broker); a broker that predates it answers
    /// `unknownService` at once, and says nothing more than the protocol's first edition. Calls
    /// that come meanwhile wait for the one answer. `nil`: no answer (no broker yet, cancelled);
    /// the next call that needs it asks again.
    func brokerFeatures() async -> BrokerFeatures? {
        let epoch = shell.machine.withLock { $0.table.connectionEpoch }
        if let known = features, known.epoch == epoch { return await known.answer.value }
        let answer = Task { await self.askFeatures(epoch: epoch) }
        features = (epoch, answer)
        return await answer.value
    }

    private func askFeatures(epoch: UInt64) async -> BrokerFeatures? {
        let completion = try? await executeMeasured(
            service: BrokerService.features, body: [],
            options: ScanOptions(timeout: configuration.connectTimeout, retry: .never))
        switch completion?.result {
        case .success(let body):
            let features = BrokerFeatures(decoding: body)
            if features.takesTrace { shell.post(.brokerTakesTrace(epoch: epoch)) }
            return features
        case .failure(let error) where error.code == .unknownService:
            return BrokerFeatures()
        default:
            features = nil
            return nil
        }
    }
}
