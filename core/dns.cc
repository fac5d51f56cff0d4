#include "core/dns.h"

#include <cerrno>

namespace sandgate::dns {
namespace {

Error malformed(const std::string& what, size_t pos) {
  return Error{EBADMSG, "read DNS message", "", what + " (at byte " + std::to_string(pos) + ")"};
}

uint8_t u8(std::string_view w, size_t i) { return static_cast<uint8_t>(w[i]); }
uint16_t u16(std::string_view w, size_t i) {
  return static_cast<uint16_t>(u8(w, i) << 8 | u8(w, i + 1));
}
uint32_t u32(std::string_view w, size_t i) {
  return static_cast<uint32_t>(u16(w, i)) << 16 | u16(w, i + 2);
}

void put16(std::string& out, uint16_t v) {
  out += static_cast<char>(v >> 8);
  out += static_cast<char>(v & 0xff);
}
void put32(std::string& out, uint32_t v) {
  put16(out, static_cast<uint16_t>(v >> 16));
  put16(out, static_cast<uint16_t>(v & 0xffff));
}

bool plain_label_byte(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

void append_label(std::string& text, std::string_view label) {
  if (!text.empty()) text += '.';
  for (char ch : label) {
    auto c = static_cast<uint8_t>(ch);
    if (plain_label_byte(c)) {
      text += lower(ch);
    } else {
      char esc[5] = {'\\', static_cast<char>('0' + c / 100), static_cast<char>('0' + c / 10 % 10),
                     static_cast<char>('0' + c % 10), 0};
      text += esc;
    }
  }
}

Result<Record> read_record(std::string_view w, size_t& pos) {
  Record r;
  SG_ASSIGN_OR_RETURN(r.name, read_name(w, pos));
  if (pos + 10 > w.size()) return malformed("record header cut short", pos);
  r.type = u16(w, pos);
  r.klass = u16(w, pos + 2);
  r.ttl = u32(w, pos + 4);
  uint16_t rdlen = u16(w, pos + 8);
  pos += 10;
  if (pos + rdlen > w.size()) return malformed("record data runs past the message", pos);
  r.rdata = std::string(w.substr(pos, rdlen));
  if (r.type == kTypeCname) {
    size_t at = pos;
    SG_ASSIGN_OR_RETURN(r.target, read_name(w, at));
    if (at != pos + rdlen) return malformed("CNAME data is not one name", pos);
  }
  pos += rdlen;
  return r;
}

}  // namespace

Result<std::string> read_name(std::string_view w, size_t& pos) {
  std::string text;
  size_t at = pos;
  size_t wire_len = 0;   // octets of the name as uncompressed: labels + length bytes + root
  size_t after = 0;      // where the caller resumes: past the first pointer
  size_t segment = pos;  // where the labels being read began (the name, or the last target)
  int pointers = 0;
  for (;;) {
    if (at >= w.size()) return malformed("name cut short", at);
    uint8_t len = u8(w, at);
    if ((len & 0xc0) == 0xc0) {
      if (at + 1 >= w.size()) return malformed("compression pointer cut short", at);
      size_t target = static_cast<size_t>(u16(w, at) & 0x3fff);
      // Only backwards, before every byte of this name read so far: each jump lands strictly
      // lower than the last, so no sequence of bytes makes a loop (RFC 1035 4.1.4: a pointer
      // names "a prior occurance of the same name").
      if (target >= segment) return malformed("compression pointer does not point backwards", at);
      segment = target;
      if (++pointers > kMaxPointers) return malformed("too many compression pointers", at);
      if (pointers == 1) after = at + 2;
      at = target;
      continue;
    }
    if (len & 0xc0) return malformed("reserved label type", at);
    if (len == 0) {
      pos = pointers ? after : at + 1;
      return text;
    }
    wire_len += 1 + len;  // with the root's zero byte still to come
    if (wire_len + 1 > kMaxNameWire) return malformed("name longer than 255 octets", at);
    if (at + 1 + len > w.size()) return malformed("label runs past the message", at);
    append_label(text, w.substr(at + 1, len));
    at += 1 + len;
  }
}

Result<Message> parse_message(std::string_view w) {
  if (w.size() < kHeaderSize) return malformed("shorter than the 12-byte header", w.size());
  Message m;
  m.id = u16(w, 0);
  uint16_t flags = u16(w, 2);
  m.response = flags & 0x8000;
  m.opcode = static_cast<uint8_t>((flags >> 11) & 0x0f);
  m.authoritative = flags & 0x0400;
  m.truncated = flags & 0x0200;
  m.recursion_desired = flags & 0x0100;
  m.recursion_available = flags & 0x0080;
  m.rcode = static_cast<uint8_t>(flags & 0x0f);
  uint16_t qd = u16(w, 4), an = u16(w, 6);
  size_t pos = kHeaderSize;
  // Each question takes at least 5 octets, each record 11: counts beyond what the message can
  // hold are refused before any allocation they would size.
  if (qd * size_t{5} > w.size() - pos) return malformed("more questions than the message holds", 4);
  for (uint16_t i = 0; i < qd; ++i) {
    Question q;
    SG_ASSIGN_OR_RETURN(q.name, read_name(w, pos));
    if (pos + 4 > w.size()) return malformed("question cut short", pos);
    q.type = u16(w, pos);
    q.klass = u16(w, pos + 2);
    pos += 4;
    m.questions.push_back(std::move(q));
  }
  m.question_wire = std::string(w.substr(kHeaderSize, pos - kHeaderSize));
  if (an * size_t{11} > w.size() - pos) return malformed("more answers than the message holds", 6);
  for (uint16_t i = 0; i < an; ++i) {
    SG_ASSIGN_OR_RETURN(auto r, read_record(w, pos));
    m.answers.push_back(std::move(r));
  }
  return m;
}

Result<std::string> encode_name(std::string_view name) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  if (name.empty()) return logic_error("encode DNS name", "empty name");
  std::string out;
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    std::string_view label = name.substr(start, dot - start);
    if (label.empty()) return logic_error("encode DNS name", "an empty label", std::string(name));
    if (label.size() > kMaxLabel)
      return logic_error("encode DNS name", "a label longer than 63", std::string(name));
    for (char c : label)
      if (!plain_label_byte(static_cast<uint8_t>(c)))
        return logic_error("encode DNS name", "a byte other than a letter, digit, - or _",
                           std::string(name));
    out += static_cast<char>(label.size());
    out += label;
    start = dot + 1;
  }
  out += '\0';
  if (out.size() > kMaxNameWire)
    return logic_error("encode DNS name", "longer than 255 octets", std::string(name));
  return out;
}

Result<std::string> encode_query(uint16_t id, std::string_view name, uint16_t type) {
  SG_ASSIGN_OR_RETURN(auto wire_name, encode_name(name));
  std::string q;
  put16(q, id);
  put16(q, 0x0100);  // standard query, recursion desired
  put16(q, 1);
  put16(q, 0);
  put16(q, 0);
  put16(q, 0);
  q += wire_name;
  put16(q, type);
  put16(q, kClassIn);
  return q;
}

std::string encode_reply(const Message& query, uint8_t rcode, const std::vector<Record>& answers) {
  std::string r;
  put16(r, query.id);
  uint16_t flags = 0x8000 | static_cast<uint16_t>((query.opcode & 0x0f) << 11) |
                   (query.recursion_desired ? 0x0100 : 0) | 0x0080 | (rcode & 0x0f);
  put16(r, flags);
  put16(r, query.question_wire.empty() ? 0 : static_cast<uint16_t>(query.questions.size()));
  std::string body;
  uint16_t count = 0;
  for (const auto& a : answers) {
    auto name = encode_name(a.name);
    if (!name.ok()) continue;
    std::string rdata = a.rdata;
    if (a.type == kTypeCname) {
      auto target = encode_name(a.target);
      if (!target.ok()) continue;
      rdata = *target;  // uncompressed: the original's pointers meant the upstream's message
    }
    if (rdata.size() > 0xffff) continue;
    body += *name;
    put16(body, a.type);
    put16(body, a.klass);
    put32(body, a.ttl);
    put16(body, static_cast<uint16_t>(rdata.size()));
    body += rdata;
    ++count;
  }
  put16(r, count);
  put16(r, 0);
  put16(r, 0);
  r += query.question_wire;
  r += body;
  return r;
}

std::vector<std::array<uint8_t, 4>> addresses_for(const Message& reply, const std::string& name,
                                                  std::vector<Record>* chain) {
  std::vector<std::array<uint8_t, 4>> out;
  std::string want = normalize_name(name);
  for (int hop = 0; hop <= kMaxCnameChain; ++hop) {
    std::string next;
    for (const auto& r : reply.answers) {
      if (r.klass != kClassIn || r.name != want) continue;
      if (r.type == kTypeA && r.rdata.size() == 4) {
        std::array<uint8_t, 4> a;
        for (size_t i = 0; i < 4; ++i) a[i] = static_cast<uint8_t>(r.rdata[i]);
        out.push_back(a);
        if (chain) chain->push_back(r);
      } else if (r.type == kTypeCname && next.empty()) {
        next = r.target;
        if (chain) chain->push_back(r);
      }
    }
    if (!out.empty() || next.empty()) break;
    want = next;
  }
  return out;
}

std::string type_name(uint16_t type) {
  switch (type) {
    case kTypeA:
      return "A";
    case 2:
      return "NS";
    case kTypeCname:
      return "CNAME";
    case 6:
      return "SOA";
    case 12:
      return "PTR";
    case 15:
      return "MX";
    case 16:
      return "TXT";
    case kTypeAaaa:
      return "AAAA";
    case 33:
      return "SRV";
    case 64:
      return "SVCB";
    case 65:
      return "HTTPS";
    case 255:
      return "ANY";
    default:
      return "TYPE" + std::to_string(type);
  }
}

std::string rcode_name(uint8_t rcode) {
  switch (rcode) {
    case kNoError:
      return "NOERROR";
    case kFormErr:
      return "FORMERR";
    case kServFail:
      return "SERVFAIL";
    case kNxDomain:
      return "NXDOMAIN";
    case kNotImp:
      return "NOTIMP";
    case kRefused:
      return "REFUSED";
    default:
      return "RCODE" + std::to_string(rcode);
  }
}

Status check_host_name(std::string_view name) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  auto bad = [&](const std::string& why) {
    return logic_error("check host name", why, std::string(name));
  };
  if (name.empty()) return bad("an empty name");
  if (name.size() > 253) return bad("longer than 253 characters");
  bool letter = false;
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    std::string_view label = name.substr(start, dot - start);
    if (label.empty()) return bad("an empty label (two dots, or a leading dot)");
    if (label.size() > kMaxLabel)
      return bad("label \"" + std::string(label) + "\" is longer than 63");
    if (label.front() == '-' || label.back() == '-')
      return bad("label \"" + std::string(label) + "\" begins or ends with '-'");
    for (char c : label) {
      if (c == '*') return bad("wildcards are not supported: list each name");
      bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
      if (!alpha && !(c >= '0' && c <= '9') && c != '-')
        return bad(std::string("'") + c + "' is not a letter, digit or '-'");
      letter = letter || alpha;
    }
    start = dot + 1;
  }
  if (!letter) return bad("no letter: an address, not a name");
  return {};
}

std::string normalize_name(std::string_view name) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  std::string out(name);
  for (char& c : out) c = lower(c);
  return out;
}

}  // namespace sandgate::dns
