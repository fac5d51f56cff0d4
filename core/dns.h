// DNS messages on the wire (RFC 1035 4.1), as the run's allowlisting resolver reads and writes
// them (session/dns_resolver.h). Pure code, no sockets: a sandbox writes these bytes, so every
// read is bounded (message size, name length, compression hops) and a malformed message is an
// error, never a crash or a loop.
//
// Names are kept as text, lower case, without the final dot. A label byte that is not a
// letter, digit, '-' or '_' (a '.' or a control byte inside a label, say) is written as \DDD,
// as dig does: two different wire names never read as the same text, so "a.b" as one label
// can never pass for the allowlisted a.b.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace sandgate::dns {

inline constexpr uint16_t kTypeA = 1;
inline constexpr uint16_t kTypeCname = 5;
inline constexpr uint16_t kTypeAaaa = 28;
inline constexpr uint16_t kClassIn = 1;

inline constexpr uint8_t kNoError = 0;
inline constexpr uint8_t kFormErr = 1;
inline constexpr uint8_t kServFail = 2;
inline constexpr uint8_t kNxDomain = 3;
inline constexpr uint8_t kNotImp = 4;
inline constexpr uint8_t kRefused = 5;

inline constexpr size_t kHeaderSize = 12;
inline constexpr size_t kMaxNameWire = 255;  // RFC 1035 3.1: a name is at most 255 octets
inline constexpr size_t kMaxLabel = 63;
// Compression pointers followed while reading one name. Each must also point before every
// byte of the name read so far, which alone rules out loops; the count bounds the work besides.
inline constexpr int kMaxPointers = 32;
// CNAMEs followed from a question's name to its addresses.
inline constexpr int kMaxCnameChain = 8;

struct Question {
  std::string name;  // text: lower case, no final dot, \DDD escapes
  uint16_t type = 0;
  uint16_t klass = 0;
};

struct Record {
  std::string name;
  uint16_t type = 0;
  uint16_t klass = 0;
  uint32_t ttl = 0;
  std::string rdata;   // raw
  std::string target;  // CNAME: the name it points to (decoded; compression resolved)
};

struct Message {
  uint16_t id = 0;
  bool response = false;  // QR
  uint8_t opcode = 0;
  bool authoritative = false, truncated = false, recursion_desired = false,
       recursion_available = false;
  uint8_t rcode = 0;
  std::vector<Question> questions;
  std::vector<Record> answers;  // the answer section; authority and additional are not read
  std::string question_wire;    // the question section's bytes as sent (for echoing back)
};

// Reads the name at `pos` (labels and compression pointers), moving `pos` past it (past the
// first pointer, if any). Errors: truncated, a label longer than 63, a name longer than 255
// octets, a pointer that does not point backwards, too many pointers, the reserved label
// types 0x40/0x80.
Result<std::string> read_name(std::string_view wire, size_t& pos);

// Header, every question, and the answer section. An error names what is wrong and where.
Result<Message> parse_message(std::string_view wire);

// A text name (letters, digits, '-', '_', dots between labels; a final dot allowed) on the
// wire, uncompressed. Errors: empty label, label over 63, over 255 octets, another byte.
Result<std::string> encode_name(std::string_view name);

// A standard query (opcode 0, RD set) for one name and type, class IN.
Result<std::string> encode_query(uint16_t id, std::string_view name, uint16_t type);

// A reply to `query` carrying only its header and question section: QR set, the query's id,
// opcode and RD, RA set, `rcode`. Needs the 12-byte header; question_wire may be empty
// (FORMERR to a question that could not be read).
std::string encode_reply(const Message& query, uint8_t rcode,
                         const std::vector<Record>& answers = {});

// The A records of `reply` that answer `name`, following CNAMEs in the answer section (at
// most kMaxCnameChain), each address in network order; `chain` gets the records followed
// (the CNAMEs and the A records), for the reply the resolver builds.
std::vector<std::array<uint8_t, 4>> addresses_for(const Message& reply, const std::string& name,
                                                  std::vector<Record>* chain = nullptr);

// "A", "AAAA", "CNAME", "TXT", ... or "TYPE<n>".
std::string type_name(uint16_t type);
// "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", or "RCODE<n>".
std::string rcode_name(uint8_t rcode);

// Whether `name` is a host name an allowlist may carry: labels of letters, digits and '-'
// (not at either end), 1..63 each, at least one letter somewhere (so an address is never
// taken for a name), 253 characters at most. A final dot is allowed. The error says why not.
Status check_host_name(std::string_view name);
// Lower case, without the final dot.
std::string normalize_name(std::string_view name);

}  // namespace sandgate::dns
