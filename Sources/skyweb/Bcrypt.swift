import CCrypt

/// bcrypt hashes through libxcrypt (`crypt_rn`, `crypt_gensalt_rn`), the library that checks
/// the system's own passwords: a hash from `htpasswd -B`, `mkpasswd -m bcrypt` or
/// `skyweb --hash-password` is checked as they check it. Written over the C library rather than
/// by hand: no bcrypt is in this project's package mirror, and a home-made one would be the
/// riskiest code in the dashboard.
enum Bcrypt {
    /// The prefixes of bcrypt's forms (`$2a$`, `$2b$`, `$2y$`): the only hashes `--auth-file`
    /// takes, so that a file of weaker hashes (MD5, DES) is refused rather than trusted.
    static let prefixes = ["$2a$", "$2b$", "$2y$"]
    /// The work factor of hashes made here: about a quarter of a second of one core each.
    static let cost = 12

    /// Whether `password` hashes to `hash` (compared in time independent of where they differ).
    static func verify(_ password: String, against hash: String) -> Bool {
        guard let computed = crypt(password, setting: hash) else { return false }
        let (given, expected) = (Array(computed.utf8), Array(hash.utf8))
        var difference = UInt8(given.count == expected.count ? 0 : 1)
        for index in expected.indices { difference |= expected[index] ^ (index < given.count ? given[index] : 0) }
        return difference == 0
    }

    /// A new hash of `password` with a random salt; nil if libxcrypt has no bcrypt.
    static func hash(_ password: String) -> String? {
        var setting = [CChar](repeating: 0, count: Int(CRYPT_GENSALT_OUTPUT_SIZE))
        // No random bytes given: libxcrypt takes them from the system.
        guard crypt_gensalt_rn("$2b$", UInt(cost), nil, 0, &setting, Int32(setting.count)) != nil else {
            return nil
        }
        return crypt(password, setting: String(decoding: setting.prefix { $0 != 0 }.map(UInt8.init), as: UTF8.self))
    }

    /// `crypt_rn`'s hash of `password` under `setting` (a salt, or a whole hash); nil when it
    /// fails (an unknown or damaged setting; a password with a NUL byte).
    private static func crypt(_ password: String, setting: String) -> String? {
        guard !password.utf8.contains(0) else { return nil }
        // crypt_data is 32 KiB: on the heap, zeroed as crypt_rn asks.
        let data = UnsafeMutablePointer<crypt_data>.allocate(capacity: 1)
        defer { data.deallocate() }
        UnsafeMutableRawPointer(data).initializeMemory(
            as: UInt8.self, repeating: 0, count: MemoryLayout<crypt_data>.size)
        guard let result = crypt_rn(password, setting, data, Int32(MemoryLayout<crypt_data>.size)) else { return nil }
        let text = String(cString: result)
        // A failure may also come back as a string starting with "*".
        return text.hasPrefix("*") ? nil : text
    }
}
