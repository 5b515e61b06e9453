-- splitrpc.lua: a Wireshark/tshark dissector for splitrpc's UDP RPC protocol, versions 1 to 5 (docs/PROTOCOL*.md).
--[[
Install: copy this file into Wireshark's personal Lua plugin folder (Help > About > Folders;
usually ~/.local/lib/wireshark/plugins/), or load it for one run:
    tshark -X lua_script:tools/wireshark/splitrpc.lua -r capture.pcapng
    tshark -2 -X lua_script:tools/wireshark/splitrpc.lua -o splitrpc.key_file:/path/keys.json -r capture.pcapng
Use two passes (tshark -2, or the GUI) to see "Response in", function names learned later in
the capture, and reassembly marks in a message's earlier segments.

Preferences (Edit > Preferences > Protocols > SPLITRPC, or tshark -o splitrpc.NAME:VALUE):
  splitrpc.port      UDP port decoded as splitrpc (default 9230); a heuristic finds it on any
                     other port unless splitrpc.heuristic is off.
  splitrpc.heuristic find splitrpc on any UDP port by its header (default on).
  splitrpc.key_file  key files (JSON), separated by ';': a client key file {"id": 1, "secret":
                     "<64 hex>"} or a server key table {"keys": [{"id":..,"secret":..}, ...]}
                     (splitrpc keys new). With a key, version 4 tags and version 5 INIT mac1s
                     are verified; without one they show "not verified: no key".
  splitrpc.reassemble  put a message's segments together (default on).

What it shows: every header field (versions 1 to 5); the CRC-16 header check (v2+) and the
CRC-32C data check (v3), Good or Bad; the version 4 trailer (key, sender, counter, time, tag);
version 5 handshakes (INIT, ACCEPT, COOKIE, NO_SESSION) and data datagrams (session, counter,
tag; AEGIS-128L's longer layout where the session's ACCEPT is in the capture); function names
from a describe reply in the capture; reassembly, retransmissions and request/reply links
with the response time. Version 5 data tags cannot be verified: the session keys come from an
X25519 exchange and are not in the capture.

Filter fields: splitrpc.* (tshark -G fields | grep splitrpc).
]]

local bit = bit32
local band, bor, bxor, lshift, rshift = bit.band, bit.bor, bit.bxor, bit.lshift, bit.rshift
local floor, fmt, sbyte, schar = math.floor, string.format, string.byte, string.char
local TWO32 = 4294967296

------------------------------------------------------------------------------------------
-- Checks: CRC-16/CCITT-FALSE, CRC-32C, BLAKE2b (RFC 7693, 64-bit words as 32-bit halves)
------------------------------------------------------------------------------------------

local CRC16_T, CRC32C_T = {}, {}
for i = 0, 255 do
    local c = lshift(i, 8)
    for _ = 1, 8 do
        c = band(c, 0x8000) ~= 0 and band(bxor(lshift(c, 1), 0x1021), 0xFFFF) or band(lshift(c, 1), 0xFFFF)
    end
    CRC16_T[i] = c
    c = i
    for _ = 1, 8 do
        c = band(c, 1) ~= 0 and bxor(rshift(c, 1), 0x82F63B78) or rshift(c, 1)
    end
    CRC32C_T[i] = c
end

-- CRC-16/CCITT-FALSE of string s (1-based bytes i..j).
local function crc16(s, i, j)
    local c = 0xFFFF
    for k = i or 1, j or #s do
        c = bxor(band(lshift(c, 8), 0xFFFF), CRC16_T[bxor(rshift(c, 8), sbyte(s, k))])
    end
    return c
end

-- The version 2 header check of a 22-byte header string: its CRC-16 with bytes 4..5 taken as zero.
local function header_check(hdr)
    return crc16(hdr:sub(1, 4) .. "\0\0" .. hdr:sub(7, 22))
end

local function crc32c(s, i, j)
    local c = 0xFFFFFFFF
    for k = i or 1, j or #s do
        c = bxor(CRC32C_T[band(bxor(c, sbyte(s, k)), 0xFF)], rshift(c, 8))
    end
    return bxor(c, 0xFFFFFFFF)
end

local IVH = { [0] = 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 }
local IVL = { [0] = 0xf3bcc908, 0x84caa73b, 0xfe94f82b, 0x5f1d36f1, 0xade682d1, 0x2b3e6c1f, 0xfb41bd6b, 0x137e2179 }
local SIGMA = {
    { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 },
    { 14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3 },
    { 11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4 },
    { 7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8 },
    { 9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13 },
    { 2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9 },
    { 12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11 },
    { 13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10 },
    { 6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5 },
    { 10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0 },
}
SIGMA[11], SIGMA[12] = SIGMA[1], SIGMA[2]

-- The mixing function G on v[a], v[b], v[c], v[d] (vh: high halves, vl: low halves) with words x, y.
local function G(vh, vl, a, b, c, d, xh, xl, yh, yl)
    local l = vl[a] + vl[b] + xl
    local h = vh[a] + vh[b] + xh + floor(l / TWO32)
    local al, ah = l % TWO32, h % TWO32
    local dl, dh = bxor(vl[d], al), bxor(vh[d], ah)           -- rotr 32: swap the halves
    dl, dh = dh, dl
    l = vl[c] + dl
    h = vh[c] + dh + floor(l / TWO32)
    local cl, ch = l % TWO32, h % TWO32
    local bl, bh = bxor(vl[b], cl), bxor(vh[b], ch)           -- rotr 24
    bl, bh = bor(rshift(bl, 24), lshift(bh, 8)), bor(rshift(bh, 24), lshift(bl, 8))
    l = al + bl + yl
    h = ah + bh + yh + floor(l / TWO32)
    al, ah = l % TWO32, h % TWO32
    dl, dh = bxor(dl, al), bxor(dh, ah)                       -- rotr 16
    dl, dh = bor(rshift(dl, 16), lshift(dh, 16)), bor(rshift(dh, 16), lshift(dl, 16))
    l = cl + dl
    h = ch + dh + floor(l / TWO32)
    cl, ch = l % TWO32, h % TWO32
    bl, bh = bxor(bl, cl), bxor(bh, ch)                       -- rotr 63 = rotl 1
    bl, bh = bor(lshift(bl, 1), rshift(bh, 31)), bor(lshift(bh, 1), rshift(bl, 31))
    vl[a], vh[a], vl[b], vh[b], vl[c], vh[c], vl[d], vh[d] = al, ah, bl, bh, cl, ch, dl, dh
end

local function le32(s, i)
    local b0, b1, b2, b3 = sbyte(s, i, i + 3)
    return b0 + b1 * 256 + b2 * 65536 + b3 * 16777216
end

-- Compresses the 128-byte block of s at 1-based offset i into state (hh, hl); t: bytes so far.
local function compress(hh, hl, s, i, t, last)
    local mh, ml, vh, vl = {}, {}, {}, {}
    for w = 0, 15 do
        ml[w] = le32(s, i + 8 * w)
        mh[w] = le32(s, i + 8 * w + 4)
    end
    for w = 0, 7 do
        vh[w], vl[w], vh[w + 8], vl[w + 8] = hh[w], hl[w], IVH[w], IVL[w]
    end
    vl[12] = bxor(vl[12], t % TWO32)
    vh[12] = bxor(vh[12], floor(t / TWO32))
    if last then
        vl[14], vh[14] = bxor(vl[14], 0xFFFFFFFF), bxor(vh[14], 0xFFFFFFFF)
    end
    for r = 1, 12 do
        local s_ = SIGMA[r]
        local x0, x1, x2, x3, x4, x5, x6, x7 = s_[1], s_[2], s_[3], s_[4], s_[5], s_[6], s_[7], s_[8]
        local x8, x9, x10, x11, x12, x13, x14, x15 = s_[9], s_[10], s_[11], s_[12], s_[13], s_[14], s_[15], s_[16]
        G(vh, vl, 0, 4, 8, 12, mh[x0], ml[x0], mh[x1], ml[x1])
        G(vh, vl, 1, 5, 9, 13, mh[x2], ml[x2], mh[x3], ml[x3])
        G(vh, vl, 2, 6, 10, 14, mh[x4], ml[x4], mh[x5], ml[x5])
        G(vh, vl, 3, 7, 11, 15, mh[x6], ml[x6], mh[x7], ml[x7])
        G(vh, vl, 0, 5, 10, 15, mh[x8], ml[x8], mh[x9], ml[x9])
        G(vh, vl, 1, 6, 11, 12, mh[x10], ml[x10], mh[x11], ml[x11])
        G(vh, vl, 2, 7, 8, 13, mh[x12], ml[x12], mh[x13], ml[x13])
        G(vh, vl, 3, 4, 9, 14, mh[x14], ml[x14], mh[x15], ml[x15])
    end
    for w = 0, 7 do
        hh[w] = bxor(hh[w], vh[w], vh[w + 8])
        hl[w] = bxor(hl[w], vl[w], vl[w + 8])
    end
end

-- BLAKE2b of string msg, keyed with string key ("" or nil: unkeyed), digest of n bytes (1..64).
local function blake2b(key, msg, n)
    key = key or ""
    local hh, hl = {}, {}
    for w = 0, 7 do hh[w], hl[w] = IVH[w], IVL[w] end
    hl[0] = bxor(hl[0], 0x01010000, lshift(#key, 8), n)
    local input = msg
    if #key > 0 then input = key .. string.rep("\0", 128 - #key) .. msg end
    local total = #input
    if total == 0 then
        compress(hh, hl, string.rep("\0", 128), 1, 0, true)
    else
        local off = 0
        while off + 128 < total do
            compress(hh, hl, input, off + 1, off + 128, false)
            off = off + 128
        end
        local tail = input:sub(off + 1)
        compress(hh, hl, tail .. string.rep("\0", 128 - #tail), 1, total, true)
    end
    local out = {}
    for w = 0, 7 do
        local l, h = hl[w], hh[w]
        out[#out + 1] = schar(band(l, 255), band(rshift(l, 8), 255), band(rshift(l, 16), 255), rshift(l, 24),
            band(h, 255), band(rshift(h, 8), 255), band(rshift(h, 16), 255), rshift(h, 24))
    end
    return table.concat(out):sub(1, n)
end

------------------------------------------------------------------------------------------
-- A small JSON reader (key files, describe replies)
------------------------------------------------------------------------------------------

local function json_decode(s)
    local pos = 1
    local ESC = { ['"'] = '"', ['\\'] = '\\', ['/'] = '/', b = '\b', f = '\f', n = '\n', r = '\r', t = '\t' }
    local function ws() pos = s:find("[^ \t\r\n]", pos) or #s + 1 end
    local value
    local function utf8(cp)
        if cp < 0x80 then return schar(cp) end
        if cp < 0x800 then return schar(0xC0 + floor(cp / 64), 0x80 + cp % 64) end
        return schar(0xE0 + floor(cp / 4096), 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
    end
    local function str()
        pos = pos + 1
        local out = {}
        while true do
            local j = s:find('["\\]', pos)
            if not j then error("unterminated string") end
            out[#out + 1] = s:sub(pos, j - 1)
            if s:sub(j, j) == '"' then pos = j + 1; return table.concat(out) end
            local e = s:sub(j + 1, j + 1)
            if e == "u" then
                out[#out + 1] = utf8(tonumber(s:sub(j + 2, j + 5), 16) or error("bad \\u"))
                pos = j + 6
            else
                out[#out + 1] = ESC[e] or error("bad escape")
                pos = j + 2
            end
        end
    end
    value = function()
        ws()
        local c = s:sub(pos, pos)
        if c == "{" then
            local t = {}
            pos = pos + 1; ws()
            if s:sub(pos, pos) == "}" then pos = pos + 1; return t end
            while true do
                ws()
                if s:sub(pos, pos) ~= '"' then error("key expected") end
                local k = str(); ws()
                if s:sub(pos, pos) ~= ":" then error("':' expected") end
                pos = pos + 1
                t[k] = value(); ws()
                c = s:sub(pos, pos); pos = pos + 1
                if c == "}" then return t end
                if c ~= "," then error("',' expected") end
            end
        elseif c == "[" then
            local t = {}
            pos = pos + 1; ws()
            if s:sub(pos, pos) == "]" then pos = pos + 1; return t end
            while true do
                t[#t + 1] = value(); ws()
                c = s:sub(pos, pos); pos = pos + 1
                if c == "]" then return t end
                if c ~= "," then error("',' expected") end
            end
        elseif c == '"' then
            return str()
        elseif s:find("^true", pos) then pos = pos + 4; return true
        elseif s:find("^false", pos) then pos = pos + 5; return false
        elseif s:find("^null", pos) then pos = pos + 4; return nil
        else
            local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
            if not num or num == "" then error("bad value at " .. pos) end
            pos = pos + #num
            return tonumber(num)
        end
    end
    local v = value()
    ws()
    if pos <= #s then error("trailing bytes") end
    return v
end

local function unhex(h)
    return (h:gsub("..", function(x) return schar(tonumber(x, 16)) end))
end

------------------------------------------------------------------------------------------
-- Protocol, fields, preferences
------------------------------------------------------------------------------------------

local p = Proto("splitrpc", "SplitRPC")

local TYPES = { [0] = "REQUEST", "RESPONSE", "ERROR", "INIT", "ACCEPT", "COOKIE", "NO_SESSION" }
local ERRORS = { "UNKNOWN_FUNCTION", "BAD_REQUEST", "BUSY", "DEADLINE", "INTERNAL", "TOO_LARGE", "DRAINING",
    "FORBIDDEN" }
local STATUS = { [0] = "Bad", [1] = "Good", [2] = "Unverified" }
local GOOD, BAD, UNVERIFIED = 1, 0, 2
local SERVER_FUNCS = { [0xFFFF] = "ping", [0xFFFE] = "describe" }
local V5_BODY = { [3] = 104, [4] = 64, [5] = 44, [6] = 8 }
local FLAG_ENCRYPT, FLAG_AES, FLAG_AEGIS = 1, 2, 4

local F = {
    magic = ProtoField.uint8("splitrpc.magic", "Magic", base.HEX),
    version = ProtoField.uint8("splitrpc.version", "Version", base.DEC, nil, 0xF0),
    type = ProtoField.uint8("splitrpc.type", "Type", base.DEC, TYPES, 0x0F),
    func_id = ProtoField.uint16("splitrpc.func_id", "Function id", base.DEC_HEX),
    func_name = ProtoField.string("splitrpc.func_name", "Function name"),
    req_id = ProtoField.uint64("splitrpc.req_id", "Request id", base.HEX),
    check16 = ProtoField.uint16("splitrpc.check16", "Header check (CRC-16)", base.HEX),
    check16_status = ProtoField.uint8("splitrpc.check16.status", "Header check status", base.DEC, STATUS),
    seq = ProtoField.uint16("splitrpc.seq", "Segment (seq)", base.DEC),
    nseg = ProtoField.uint16("splitrpc.nseg", "Segments (nseg)", base.DEC),
    msg_len = ProtoField.uint32("splitrpc.msg_len", "Message length", base.DEC),
    aux = ProtoField.uint16("splitrpc.aux", "Aux", base.DEC),
    error = ProtoField.uint16("splitrpc.error", "Error code", base.DEC, ERRORS),
    error_name = ProtoField.string("splitrpc.error.name", "Error"),
    error_text = ProtoField.string("splitrpc.error.text", "Error text"),
    data = ProtoField.bytes("splitrpc.data", "Data"),
    data_len = ProtoField.uint32("splitrpc.data_len", "Data length", base.DEC),
    check32 = ProtoField.uint32("splitrpc.check32", "Data check (CRC-32C)", base.HEX),
    check32_status = ProtoField.uint8("splitrpc.check32.status", "Data check status", base.DEC, STATUS),
    -- version 4 trailer
    v4_key_id = ProtoField.uint32("splitrpc.v4.key_id", "Key id", base.DEC),
    v4_sender = ProtoField.uint64("splitrpc.v4.sender", "Sender", base.HEX),
    v4_counter = ProtoField.uint64("splitrpc.v4.counter", "Counter", base.DEC),
    v4_time = ProtoField.uint32("splitrpc.v4.time", "Time (ms since the epoch, mod 2^32)", base.DEC),
    v4_time_abs = ProtoField.absolute_time("splitrpc.v4.time_abs", "Time (resolved near the capture time)", base.UTC),
    v4_tag = ProtoField.bytes("splitrpc.v4.tag", "Tag (BLAKE2b-16)"),
    v4_tag_status = ProtoField.uint8("splitrpc.v4.tag.status", "Tag status", base.DEC, STATUS),
    v4_tag_note = ProtoField.string("splitrpc.v4.tag.note", "Tag"),
    -- version 5
    v5_key_id = ProtoField.uint32("splitrpc.v5.key_id", "Key id", base.DEC),
    v5_e_c = ProtoField.bytes("splitrpc.v5.e_c", "Client ephemeral key (e_c)"),
    v5_time = ProtoField.uint64("splitrpc.v5.time", "Time (ms since the epoch)", base.DEC),
    v5_time_abs = ProtoField.absolute_time("splitrpc.v5.time_abs", "Time", base.UTC),
    v5_flags = ProtoField.uint32("splitrpc.v5.flags", "Flags", base.HEX),
    v5_flag_encrypt = ProtoField.bool("splitrpc.v5.flags.encrypt", "ENCRYPT", 32, nil, FLAG_ENCRYPT),
    v5_flag_aes = ProtoField.bool("splitrpc.v5.flags.aes", "AES (AES-256-GCM)", 32, nil, FLAG_AES),
    v5_flag_aegis = ProtoField.bool("splitrpc.v5.flags.aegis", "AEGIS (AEGIS-128L)", 32, nil, FLAG_AEGIS),
    v5_flag_unknown = ProtoField.uint32("splitrpc.v5.flags.unknown", "Undefined bits", base.HEX, nil, 0xFFFFFFF8),
    v5_prev = ProtoField.uint64("splitrpc.v5.prev", "Previous session (prev)", base.HEX),
    v5_resume = ProtoField.bytes("splitrpc.v5.resume", "Resume"),
    v5_mac1 = ProtoField.bytes("splitrpc.v5.mac1", "mac1"),
    v5_mac1_status = ProtoField.uint8("splitrpc.v5.mac1.status", "mac1 status", base.DEC, STATUS),
    v5_mac1_note = ProtoField.string("splitrpc.v5.mac1.note", "mac1"),
    v5_cookie_mac = ProtoField.bytes("splitrpc.v5.cookie_mac", "cookie_mac"),
    v5_session = ProtoField.uint64("splitrpc.v5.session", "Session", base.HEX),
    v5_e_s = ProtoField.bytes("splitrpc.v5.e_s", "Server ephemeral key (e_s)"),
    v5_confirm = ProtoField.bytes("splitrpc.v5.confirm", "Confirm"),
    v5_nonce = ProtoField.bytes("splitrpc.v5.nonce", "Nonce"),
    v5_cookie = ProtoField.bytes("splitrpc.v5.cookie", "Sealed cookie (ciphertext and tag)"),
    v5_counter = ProtoField.uint64("splitrpc.v5.counter", "Counter", base.DEC),
    v5_tag = ProtoField.bytes("splitrpc.v5.tag", "Tag"),
    v5_tag_head = ProtoField.bytes("splitrpc.v5.tag_head", "Tag, first 16 bytes (AEGIS-128L)"),
    v5_tag_status = ProtoField.uint8("splitrpc.v5.tag.status", "Tag status", base.DEC, STATUS),
    v5_tag_note = ProtoField.string("splitrpc.v5.tag.note", "Tag"),
    v5_suite = ProtoField.string("splitrpc.v5.suite", "Suite"),
    v5_encrypted = ProtoField.bool("splitrpc.v5.encrypted", "Data encrypted"),
    v5_accept_in = ProtoField.framenum("splitrpc.v5.accept_in", "Session's ACCEPT in"),
    -- conversation
    response_in = ProtoField.framenum("splitrpc.response_in", "Response in"),
    request_in = ProtoField.framenum("splitrpc.request_in", "Request in"),
    time = ProtoField.relative_time("splitrpc.time", "Time"),
    retransmission = ProtoField.framenum("splitrpc.retransmission", "Retransmission of frame"),
    reassembled_in = ProtoField.framenum("splitrpc.reassembled_in", "Reassembled in"),
    reassembled = ProtoField.string("splitrpc.reassembled", "Reassembled message"),
    reassembled_length = ProtoField.uint32("splitrpc.reassembled.length", "Reassembled length", base.DEC),
    reassembled_count = ProtoField.uint16("splitrpc.reassembled.count", "Segment count", base.DEC),
    segment = ProtoField.framenum("splitrpc.segment", "Segment in frame"),
    reassembled_data = ProtoField.bytes("splitrpc.reassembled.data", "Reassembled data"),
}
local fields = {}
for _, f in pairs(F) do fields[#fields + 1] = f end
p.fields = fields

local G_, S_ = expert.group, expert.severity
local E = {
    check16 = ProtoExpert.new("splitrpc.check16.bad", "Bad header check (CRC-16)", G_.CHECKSUM, S_.ERROR),
    check32 = ProtoExpert.new("splitrpc.check32.bad", "Bad data check (CRC-32C)", G_.CHECKSUM, S_.ERROR),
    tag = ProtoExpert.new("splitrpc.v4.tag.bad", "Bad version 4 tag", G_.CHECKSUM, S_.ERROR),
    mac1 = ProtoExpert.new("splitrpc.v5.mac1.bad", "Bad INIT mac1", G_.CHECKSUM, S_.ERROR),
    unverified = ProtoExpert.new("splitrpc.unverified", "Not verified", G_.SECURITY, S_.NOTE),
    short = ProtoExpert.new("splitrpc.short", "Datagram too short", G_.MALFORMED, S_.ERROR),
    segment = ProtoExpert.new("splitrpc.bad_segment", "Impossible segmentation", G_.MALFORMED, S_.ERROR),
    malformed = ProtoExpert.new("splitrpc.malformed", "Not a datagram of the protocol", G_.MALFORMED, S_.ERROR),
    conflict = ProtoExpert.new("splitrpc.segment.conflict", "Segment repeated with other bytes", G_.MALFORMED,
        S_.WARN),
    retrans = ProtoExpert.new("splitrpc.retransmission.expert", "Retransmission", G_.SEQUENCE, S_.NOTE),
    suite = ProtoExpert.new("splitrpc.v5.suite_unknown", "Suite unknown", G_.UNDECODED, S_.NOTE),
    keys = ProtoExpert.new("splitrpc.key_file.error", "Key file not read", G_.PROTOCOL, S_.WARN),
}
p.experts = { E.check16, E.check32, E.tag, E.mac1, E.unverified, E.short, E.segment, E.malformed, E.conflict, E.retrans,
    E.suite, E.keys }

p.prefs.port = Pref.uint("UDP port", 9230, "The UDP port decoded as splitrpc (a heuristic finds it on any other)")
p.prefs.key_file = Pref.string("Key file(s)", "",
    "JSON key files, separated by ';': a client key file {\"id\":..,\"secret\":\"<64 hex>\"} or a server key table")
p.prefs.heuristic = Pref.bool("Find splitrpc on any UDP port", true,
    "Try every UDP datagram on other ports: magic 0xA5, version 1 to 5, a plausible type and lengths")
p.prefs.reassemble = Pref.bool("Reassemble messages", true, "Put a message's segments together")

local f_icmp = Field.new("icmp.type")
local f_icmpv6 = Field.new("icmpv6.type")

------------------------------------------------------------------------------------------
-- Keys, and the state of one capture (built on the first pass, read on later ones)
------------------------------------------------------------------------------------------

local keys, keys_error, keys_loaded = {}, nil, false
local mac1_keys = {}

local function load_keys()
    keys, keys_error, keys_loaded, mac1_keys = {}, nil, true, {}
    for path in (p.prefs.key_file or ""):gmatch("[^;]+") do
        local fh, err = io.open(path, "rb")
        if not fh then
            keys_error = err
        else
            local text = fh:read("*a")
            fh:close()
            local ok, doc = pcall(json_decode, text)
            local list = ok and type(doc) == "table" and (doc.keys or (doc.id and { doc }) or doc) or nil
            if not list then
                keys_error = path .. ": " .. (ok and "no keys" or tostring(doc))
            else
                for _, k in ipairs(list) do
                    if type(k) == "table" and type(k.id) == "number" and type(k.secret) == "string"
                        and k.secret:match("^%x+$") and #k.secret == 64 then
                        keys[k.id] = unhex(k.secret)
                    else
                        keys_error = path .. ": an entry without id and a 64-hex-digit secret"
                    end
                end
            end
        end
    end
end

local frames, msgs, calls, sessions, names

local function reset()
    frames, msgs, calls, sessions, names = {}, {}, {}, {}, {}
    keys_loaded = false
end
p.init = reset
reset()

local registered_port
local function register_port()
    local t = DissectorTable.get("udp.port")
    if registered_port then t:remove(registered_port, p) end
    registered_port = p.prefs.port
    if registered_port ~= 0 then t:add(registered_port, p) end
end

function p.prefs_changed()
    keys_loaded = false
    if registered_port ~= p.prefs.port then register_port() end
end

------------------------------------------------------------------------------------------
-- Dissection
------------------------------------------------------------------------------------------

local function hex(s) return (s:gsub(".", function(c) return fmt("%02x", sbyte(c)) end)) end
local function be(s, i, n)
    local v = 0
    for k = i, i + n - 1 do v = v * 256 + sbyte(s, k) end
    return v
end

local function nstime(ms)
    local sec = floor(ms / 1000)
    return NSTime.new(sec, floor((ms - sec * 1000) * 1000000 + 0.5))
end

local function reltime(d)
    local sec = floor(d)
    return NSTime.new(sec, floor((d - sec) * 1e9 + 0.5))
end

-- The v4 trailer's 32-bit time resolved to the whole ms value nearest the capture time.
local function resolve_ms(raw32, capture_s)
    local now = capture_s * 1000
    local base = now - now % TWO32
    local best
    for _, c in ipairs({ base - TWO32 + raw32, base + raw32, base + TWO32 + raw32 }) do
        if not best or math.abs(c - now) < math.abs(best - now) then best = c end
    end
    return best
end

local function status_item(tree, field, range, st, note_field, note)
    tree:add(field, range, st):set_generated()
    if note_field and note then tree:add(note_field, range, note):set_generated() end
end

-- Whether a datagram looks like splitrpc (the heuristic and the port dissector's first test).
local function plausible(tvb)
    local len = tvb:len()
    if len < 22 then return false end
    local magic, vt = tvb(0, 1):uint(), tvb(1, 1):uint()
    local ver, typ = rshift(vt, 4), band(vt, 15)
    if magic ~= 0xA5 or ver < 1 or ver > 5 or typ > (ver == 5 and 6 or 2) then return false end
    local seq, nseg, msg_len = tvb(12, 2):uint(), tvb(14, 2):uint(), tvb(16, 4):uint()
    if nseg == 0 or seq >= nseg then return false end
    if ver == 5 and typ >= 3 then return len == 22 + V5_BODY[typ] and msg_len == V5_BODY[typ] end
    local over = ({ 0, 0, 4, 40, 32 })[ver]
    local L = len - 22 - over
    if L < 0 then return false end
    if nseg == 1 then return L == msg_len or (ver == 5 and L - 16 == msg_len) end
    return L <= msg_len and L >= 1
end

local function server_names(server)
    local t = names[server]
    if not t then t = {}; names[server] = t end
    return t
end

-- A name from the capture made safe to print: control bytes, bytes over 0x7e and backslashes as
-- \xHH (a describe reply is the sender's text: it must not reach a terminal raw), at most 128.
local function printable(name)
    local out = name:sub(1, 128):gsub("[%c\\\128-\255]", function(c) return fmt("\\x%02x", sbyte(c)) end)
    return #name > 128 and out .. "..." or out
end

-- Learns function names from a describe reply's data.
local function learn_names(server, data)
    if data:sub(1, 12) ~= '{"describe":' then return end
    local ok, doc = pcall(json_decode, data)
    if not ok or type(doc) ~= "table" or type(doc.functions) ~= "table" then return end
    local t = server_names(server)
    for _, f in ipairs(doc.functions) do
        if type(f) == "table" and type(f.id) == "number" and type(f.name) == "string" then t[f.id] = printable(f.name) end
    end
end

-- First pass: the frame's place in its message and call (nothing is read back here).
local function track(n, ts, st)
    local client = st.is_request and st.src or st.dst
    local ckey = table.concat({ client, st.version, st.auth, st.req_hex, st.func_id }, "|")
    local call = calls[ckey]
    if not call then call = {}; calls[ckey] = call end
    if st.is_request then
        if not call.req_frame then call.req_frame, call.req_ts = n, ts end
    elseif not call.resp_frame then
        call.resp_frame = n
    end
    local fr = { call = call }
    if st.typ > 2 or st.data == nil then return fr end -- handshake datagrams: linked, not reassembled
    local keep = st.nseg > 1 and p.prefs.reassemble
    local mkey = ckey .. "|" .. st.typ
    local m = msgs[mkey]
    if not m or m.nseg ~= st.nseg or m.msg_len ~= st.msg_len then
        m = { nseg = st.nseg, msg_len = st.msg_len, parts = {}, count = 0 }
        msgs[mkey] = m
    end
    fr.msg = m
    local prior = m.parts[st.seq]
    if prior then
        fr.retrans_of = prior.frame
        -- other bytes than the first copy's: compared where the first is still held (a message being
        -- reassembled), else by length; the first copy is the one kept
        if prior.len ~= #st.data or (prior.data and prior.data ~= st.data) then fr.conflict = prior.frame end
        return fr
    end
    m.parts[st.seq] = { frame = n, data = keep and st.data or nil, len = #st.data }
    m.count = m.count + 1
    if m.count == st.nseg then
        m.done_frame = n
        -- the pages' rule over the whole message: every segment but the last S bytes, the sum msg_len
        local total, S = 0, m.parts[0].len
        for i = 0, st.nseg - 1 do
            total = total + m.parts[i].len
            if i < st.nseg - 1 and m.parts[i].len ~= S then m.bad = fmt("segment %d has %d bytes, segment 0 %d", i, m.parts[i].len, S) end
        end
        if total ~= st.msg_len then m.bad = fmt("the segments hold %d bytes, msg_len says %d", total, st.msg_len) end
        local data = st.data
        if keep then
            local chunks, fl = {}, {}
            for i = 0, st.nseg - 1 do
                chunks[#chunks + 1] = m.parts[i].data
                fl[#fl + 1] = m.parts[i].frame
                m.parts[i].data = nil
            end
            m.data = table.concat(chunks)
            table.sort(fl)
            m.frame_list = fl
            data = m.data
        end
        if st.func_id == 0xFFFE and st.typ == 1 and not st.encrypted then learn_names(st.src, data) end
    end
    return fr
end

local function dissect(tvb, pinfo, root)
    local len = tvb:len()
    if len < 22 then return 0 end
    if not keys_loaded then load_keys() end
    local raw = tvb:raw(0, len)
    local vt = sbyte(raw, 2)
    local ver, typ = rshift(vt, 4), band(vt, 15)
    local func_id = be(raw, 3, 2)
    local seq, nseg, msg_len, aux = be(raw, 13, 2), be(raw, 15, 2), be(raw, 17, 4), be(raw, 21, 2)
    local n = pinfo.number
    local in_icmp = (f_icmp() ~= nil) or (f_icmpv6() ~= nil)
    local fr = (not in_icmp) and frames[n] or nil
    local first = not pinfo.visited and not in_icmp and fr == nil
    if first then fr = {} end
    fr = fr or {}

    pinfo.cols.protocol = "SPLITRPC"
    local tree = root:add(p, tvb(), "SplitRPC")
    tree:add(F.magic, tvb(0, 1))
    tree:add(F.version, tvb(1, 1))
    tree:add(F.type, tvb(1, 1))
    local fid_item = tree:add(F.func_id, tvb(2, 2))
    local req_hex, trust = nil, true
    if ver == 1 then
        req_hex = hex(raw:sub(5, 12))
        tree:add(F.req_id, tvb(4, 8))
    else
        local ck, want = be(raw, 5, 2), header_check(raw:sub(1, 22))
        local it = tree:add(F.check16, tvb(4, 2))
        local ok = ck == want
        it:append_text(ok and " [correct]" or fmt(" [incorrect, should be 0x%04x]", want))
        it:add(F.check16_status, tvb(4, 2), ok and GOOD or BAD):set_generated()
        if not ok then it:add_proto_expert_info(E.check16); trust = false end
        req_hex = hex(raw:sub(7, 12))
        tree:add(F.req_id, tvb(6, 6), tvb(6, 6):uint64())
    end
    tree:add(F.seq, tvb(12, 2))
    tree:add(F.nseg, tvb(14, 2))
    tree:add(F.msg_len, tvb(16, 4))
    if typ == 2 then
        tree:add(F.aux, tvb(20, 2))
        tree:add(F.error, tvb(20, 2))
        tree:add(F.error_name, tvb(20, 2), ERRORS[aux] or fmt("unknown (%d)", aux)):set_generated()
    else
        tree:add(F.aux, tvb(20, 2))
    end
    if nseg == 0 or seq >= nseg then tree:add_proto_expert_info(E.segment); trust = false end
    -- versions 1 to 5; types 0-2, and 3-6 in version 5: anything else is shown, never believed
    local known = ver >= 1 and ver <= 5 and typ <= (ver == 5 and 6 or 2)
    if not known then
        tree:add_proto_expert_info(E.malformed, fmt("Version %d, type %d: not a datagram of the protocol "
            .. "(versions 1 to 5; types 0 to 2, and 3 to 6 in version 5)", ver, typ))
        trust = false
    end

    -- the body: data, and what follows it
    local d0, dlen = 22, len - 22                           -- the data, 0-based offset and length
    local auth = ""
    local encrypted = false
    local info_extra = ""
    local data = nil
    local checked_len = typ <= 2                            -- whether dlen is known to be the data's
    -- the data bytes (d0, dlen), before any trailer in the tree
    local function add_data()
        if typ > 2 or dlen < 0 then return end
        if dlen > 0 then
            tree:add(F.data, tvb(d0, dlen))
            if typ == 2 and not encrypted then
                tree:add(F.error_text, tvb(d0, dlen), raw:sub(d0 + 1, d0 + dlen))
            end
        end
        tree:add(F.data_len, tvb(d0, dlen), dlen):set_generated()
        data = raw:sub(d0 + 1, d0 + dlen)
    end
    if not known then
        if dlen > 0 then tree:add(F.data, tvb(d0, dlen)) end
        checked_len = false
    elseif ver <= 2 then
        add_data()
    elseif ver == 3 then
        if len < 26 then
            tree:add_proto_expert_info(E.short); trust = false; dlen = 0
            add_data()
        else
            dlen = len - 26
            add_data()
            local ck, want = be(raw, len - 3, 4), crc32c(raw, 1, len - 4)
            local it = tree:add(F.check32, tvb(len - 4, 4))
            local ok = ck == want
            it:append_text(ok and " [correct]" or fmt(" [incorrect, should be 0x%08x]", want))
            it:add(F.check32_status, tvb(len - 4, 4), ok and GOOD or BAD):set_generated()
            if not ok then it:add_proto_expert_info(E.check32); trust = false end
        end
    elseif ver == 4 then
        if len < 62 then
            tree:add_proto_expert_info(E.short); trust = false; dlen = 0
            add_data()
        else
            dlen = len - 62
            add_data()
            local t0 = len - 40
            local tt = tree:add(p, tvb(t0, 40), "Version 4 trailer")
            local key_id = be(raw, t0 + 1, 4)
            auth = tostring(key_id)
            tt:add(F.v4_key_id, tvb(t0, 4))
            tt:add(F.v4_sender, tvb(t0 + 4, 8))
            tt:add(F.v4_counter, tvb(t0 + 12, 8))
            local traw = be(raw, t0 + 21, 4)
            tt:add(F.v4_time, tvb(t0 + 20, 4))
            tt:add(F.v4_time_abs, tvb(t0 + 20, 4), nstime(resolve_ms(traw, pinfo.abs_ts))):set_generated()
            local tag = tt:add(F.v4_tag, tvb(t0 + 24, 16))
            local st = fr.tag_status
            if st == nil then
                local secret = keys[key_id]
                if secret then
                    local want = blake2b(secret, raw:sub(1, len - 16), 16)
                    st = want == raw:sub(len - 15) and GOOD or BAD
                    fr.tag_want = want
                else
                    st = UNVERIFIED
                end
                fr.tag_status = st
            end
            if st == UNVERIFIED then
                status_item(tag, F.v4_tag_status, tvb(t0 + 24, 16), st, F.v4_tag_note,
                    next(keys) and fmt("not verified: no key for key id %d", key_id) or "not verified: no key")
                tag:add_proto_expert_info(E.unverified, "Tag not verified: no key")
            else
                tag:append_text(st == GOOD and " [correct]" or " [incorrect, should be " .. hex(fr.tag_want) .. "]")
                status_item(tag, F.v4_tag_status, tvb(t0 + 24, 16), st)
                if st == BAD then tag:add_proto_expert_info(E.tag); trust = false end
            end
            if keys_error then tag:add_proto_expert_info(E.keys, "Key file not read: " .. keys_error) end
            info_extra = info_extra .. " key=" .. key_id
        end
    elseif ver == 5 and typ >= 3 then
        dlen = 0
        local blen = V5_BODY[typ]
        if len ~= 22 + blen or msg_len ~= blen or seq ~= 0 or nseg ~= 1 then
            tree:add_proto_expert_info(E.segment, fmt("A %s is 22 + %d bytes, seq 0, nseg 1, msg_len %d",
                TYPES[typ], blen, blen))
            trust = false
        end
        if len < 22 + blen then
            tree:add_proto_expert_info(E.short); trust = false
        else
            local b = 22
            local bt = tree:add(p, tvb(b, blen), TYPES[typ] .. " body")
            if typ == 3 then
                local key_id = be(raw, b + 1, 4)
                bt:add(F.v5_key_id, tvb(b, 4))
                bt:add(F.v5_e_c, tvb(b + 4, 32))
                local ms = be(raw, b + 37, 8)
                bt:add(F.v5_time, tvb(b + 36, 8))
                bt:add(F.v5_time_abs, tvb(b + 36, 8), nstime(ms)):set_generated()
                local fl = bt:add(F.v5_flags, tvb(b + 44, 4))
                fl:add(F.v5_flag_encrypt, tvb(b + 44, 4))
                fl:add(F.v5_flag_aes, tvb(b + 44, 4))
                fl:add(F.v5_flag_aegis, tvb(b + 44, 4))
                fl:add(F.v5_flag_unknown, tvb(b + 44, 4))
                bt:add(F.v5_prev, tvb(b + 48, 8))
                bt:add(F.v5_resume, tvb(b + 56, 16))
                local m1 = bt:add(F.v5_mac1, tvb(b + 72, 16))
                local st = fr.tag_status
                if st == nil then
                    local psk = keys[key_id]
                    if psk then
                        mac1_keys[key_id] = mac1_keys[key_id] or blake2b(psk, "splitrpc v5 mac1", 32)
                        st = blake2b(mac1_keys[key_id], raw:sub(1, 94), 16) == raw:sub(95, 110) and GOOD or BAD
                    else
                        st = UNVERIFIED
                    end
                    fr.tag_status = st
                end
                if st == UNVERIFIED then
                    status_item(m1, F.v5_mac1_status, tvb(b + 72, 16), st, F.v5_mac1_note,
                        next(keys) and fmt("not verified: no key for key id %d", key_id) or "not verified: no key")
                else
                    m1:append_text(st == GOOD and " [correct]" or " [incorrect]")
                    status_item(m1, F.v5_mac1_status, tvb(b + 72, 16), st)
                    if st == BAD then m1:add_proto_expert_info(E.mac1); trust = false end
                end
                bt:add(F.v5_cookie_mac, tvb(b + 88, 16))
                auth, info_extra = "hs", fmt(" key=%d", key_id)
            elseif typ == 4 then
                local flags = be(raw, b + 45, 4)
                local sid = hex(raw:sub(b + 5, b + 12))
                bt:add(F.v5_key_id, tvb(b, 4))
                bt:add(F.v5_session, tvb(b + 4, 8))
                bt:add(F.v5_e_s, tvb(b + 12, 32))
                local fl = bt:add(F.v5_flags, tvb(b + 44, 4))
                fl:add(F.v5_flag_encrypt, tvb(b + 44, 4))
                fl:add(F.v5_flag_aes, tvb(b + 44, 4))
                fl:add(F.v5_flag_aegis, tvb(b + 44, 4))
                fl:add(F.v5_flag_unknown, tvb(b + 44, 4))
                bt:add(F.v5_confirm, tvb(b + 48, 16))
                auth, info_extra = "hs", " session=0x" .. sid
                if first and trust and not sessions[sid] then
                    sessions[sid] = { flags = flags, frame = n }
                end
            elseif typ == 5 then
                bt:add(F.v5_nonce, tvb(b, 12))
                bt:add(F.v5_cookie, tvb(b + 12, 32))
                auth = "hs"
            else
                local sid = hex(raw:sub(b + 1, b + 8))
                bt:add(F.v5_session, tvb(b, 8))
                auth, info_extra = sid, " session=0x" .. sid
            end
        end
    elseif ver == 5 then
        if len < 54 then
            tree:add_proto_expert_info(E.short); trust = false; dlen = 0
            add_data()
        else
            local sid = hex(raw:sub(len - 31, len - 24))
            auth = sid
            local s = sessions[sid]
            local suite, aegis
            if s then
                aegis = band(s.flags, FLAG_AEGIS) ~= 0
                encrypted = band(s.flags, FLAG_ENCRYPT) ~= 0
                suite = aegis and "AEGIS-128L"
                    or (band(s.flags, FLAG_AES) ~= 0 and "AES-256-GCM" or "ChaCha20-Poly1305")
            end
            if aegis and len < 70 then
                tree:add_proto_expert_info(E.short); trust = false; aegis = false
            end
            dlen = len - 54 - (aegis and 16 or 0)
            add_data()
            if not s then checked_len = false end
            local t0 = len - 32
            local tt = tree:add(p, tvb(aegis and len - 48 or t0, aegis and 48 or 32), "Version 5 trailer")
            if aegis then tt:add(F.v5_tag_head, tvb(len - 48, 16)) end
            tt:add(F.v5_session, tvb(t0, 8))
            tt:add(F.v5_counter, tvb(t0 + 8, 8))
            local tag = tt:add(F.v5_tag, tvb(t0 + 16, 16))
            if aegis then tag:append_text(" (last 16 bytes)") end
            status_item(tag, F.v5_tag_status, tvb(t0 + 16, 16), UNVERIFIED, F.v5_tag_note,
                "not verified: session keys are not in the capture")
            if s then
                tt:add(F.v5_suite, tvb(t0, 8), suite):set_generated()
                tt:add(F.v5_encrypted, tvb(t0, 8), encrypted):set_generated()
                tt:add(F.v5_accept_in, tvb(t0, 8), s.frame):set_generated()
            else
                local it = tt:add(F.v5_suite, tvb(t0, 8),
                    "unknown (no ACCEPT of this session in the capture; a 32-byte trailer assumed)")
                it:set_generated()
                it:add_proto_expert_info(E.suite, "Suite unknown: no ACCEPT of this session in the capture")
            end
            info_extra = " session=0x" .. sid
        end
    end

    if checked_len and nseg >= 1 and seq < nseg and dlen >= 0 then
        local S = nseg > 1 and (seq < nseg - 1 and dlen or (msg_len - dlen) / (nseg - 1)) or dlen
        local ok = nseg == 1 and dlen == msg_len or nseg > 1 and S >= 1 and S == floor(S)
            and (seq < nseg - 1 or (dlen >= 1 and dlen <= S)) and (nseg - 1) * S < msg_len and nseg * S >= msg_len
        if not ok then
            tree:add_proto_expert_info(E.segment, fmt(
                "Impossible segmentation: %d data bytes in segment %d of %d, msg_len %d", dlen, seq, nseg, msg_len))
            trust = false
        end
    end

    -- the conversation: built on the first pass, read afterwards
    if first then
        if trust then
            local src = tostring(pinfo.src) .. ":" .. pinfo.src_port
            local dst = tostring(pinfo.dst) .. ":" .. pinfo.dst_port
            local st = {
                is_request = typ == 0 or typ == 3, src = src, dst = dst, version = ver, auth = auth,
                req_hex = req_hex, func_id = func_id, typ = typ, seq = seq, nseg = nseg, msg_len = msg_len,
                data = data, encrypted = encrypted,
            }
            local t = track(n, pinfo.abs_ts, st)
            for k, v in pairs(t) do fr[k] = v end
            fr.server = (typ == 0 or typ == 3) and dst or src
        end
        frames[n] = fr
    end

    local is_request = typ == 0 or typ == 3
    local server = fr.server or ((is_request and tostring(pinfo.dst) .. ":" .. pinfo.dst_port)
        or tostring(pinfo.src) .. ":" .. pinfo.src_port)
    local fname = SERVER_FUNCS[func_id] or (names[server] and names[server][func_id])
    if fname then
        tree:add(F.func_name, tvb(2, 2), fname):set_generated()
        fid_item:append_text(" (" .. fname .. ")")
    end

    local call, m = fr.call, fr.msg
    if call then
        if is_request and call.resp_frame then
            tree:add(F.response_in, call.resp_frame):set_generated()
        elseif not is_request and call.req_frame then
            tree:add(F.request_in, call.req_frame):set_generated()
            tree:add(F.time, reltime(pinfo.abs_ts - call.req_ts)):set_generated()
        end
    end
    local seg_info = ""
    if fr.retrans_of then
        local it = tree:add(F.retransmission, fr.retrans_of)
        it:set_generated()
        it:add_proto_expert_info(E.retrans, fmt("Retransmission of frame %d", fr.retrans_of))
        seg_info = fmt(" [retransmission of %d]", fr.retrans_of)
        if fr.conflict then
            it:add_proto_expert_info(E.conflict, fmt("Segment %d again with other bytes than frame %d's (the first "
                .. "copy is the one kept)", seq, fr.conflict))
            seg_info = seg_info .. " [other bytes]"
        end
    elseif m and m.nseg > 1 and m.done_frame and p.prefs.reassemble then
        if m.done_frame == n and m.data then
            local fl = {}
            for i, v in ipairs(m.frame_list) do fl[i] = tostring(v) end
            local rt = tree:add(F.reassembled, tvb(d0, math.max(dlen, 0)),
                fmt("%d bytes in %d segments, frames %s", #m.data, m.nseg, table.concat(fl, ",")))
            rt:set_generated()
            rt:add(F.reassembled_length, #m.data):set_generated()
            rt:add(F.reassembled_count, m.nseg):set_generated()
            for _, v in ipairs(m.frame_list) do rt:add(F.segment, v):set_generated() end
            if #m.data > 0 then
                local rtvb = ByteArray.new(m.data, true):tvb("Reassembled splitrpc message")
                rt:add(F.reassembled_data, rtvb())
            end
            seg_info = fmt(" [reassembled %d bytes]", #m.data)
        else
            tree:add(F.reassembled_in, m.done_frame):set_generated()
        end
    end

    if m and m.bad and m.done_frame == n then -- the message as a whole breaks the segmentation rules
        tree:add_proto_expert_info(E.segment, "Impossible segmentation: " .. m.bad)
        trust = false
    end

    -- the Info column
    local what = TYPES[typ] or fmt("type %d", typ)
    if typ == 2 then what = what .. " " .. (ERRORS[aux] or tostring(aux)) end
    local fn = ""
    if typ <= 2 or typ == 6 then fn = fmt(" %s(%d)", fname or "func", func_id) end
    local segs = nseg > 1 and fmt(" seg %d/%d", seq + 1, nseg) or ""
    local bad = trust and "" or " [BAD]"
    pinfo.cols.info:set(fmt("%s%s req=0x%s%s v%d%s%s%s", what, fn, req_hex, segs, ver, info_extra, seg_info, bad))
    tree:append_text(fmt(", v%d %s%s req=0x%s%s", ver, what, fn, req_hex, segs))
    return len
end

function p.dissector(tvb, pinfo, tree)
    if tvb:len() < 22 or tvb(0, 1):uint() ~= 0xA5 then return 0 end
    return dissect(tvb, pinfo, tree)
end

local function heuristic(tvb, pinfo, tree)
    if not p.prefs.heuristic or not plausible(tvb) then return false end
    dissect(tvb, pinfo, tree)
    return true
end

p:register_heuristic("udp", heuristic)
register_port()

-- for tests and other scripts: the checks this dissector computes
package.loaded.splitrpc_dissector = {
    blake2b = blake2b, crc16 = crc16, crc32c = crc32c, header_check = header_check, json_decode = json_decode,
}
