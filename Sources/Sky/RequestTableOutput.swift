/// Where a ``RequestTable`` puts its actions: a list of them (tests read it), or the client
/// machine's own list, written in the machine's terms as the table acts.
///
/// Why not always a list: the client's machine turned each table action into one of its own
/// (the socket in use, packed or not), which took a second list, a walk over it and a
/// destruction of every action, on every call.
protocol RequestTableOutput {
    mutating func append(_ action: consuming RequestTable.Action)
}

extension Array: RequestTableOutput where Element == RequestTable.Action {}
