// nltk's PorterStemmer in its default mode, NLTK_EXTENSIONS, which is the stemmer rouge-score's
// tokenizer uses. The rules follow nltk 3.x (the rewrite with ORIGINAL_ALGORITHM /
// MARTIN_EXTENSIONS / NLTK_EXTENSIONS modes); only the NLTK_EXTENSIONS behaviour is implemented.
//
// Python indexes strings by code point, so the word is stemmed as a sequence of code points:
// the length tests (len(word) <= 2, len(word) == 4 in step 1a, ...) and the consonant/vowel
// pattern must count a non-ASCII letter as one character, not as its UTF-8 bytes.
#include <string>
#include <string_view>

#include "eval/python_str.h"
#include "foundry/eval/metrics.h"

namespace foundry::eval {

namespace {

using Word = std::u32string;
using View = std::u32string_view;

// ---- letters, measure and the *v*, *d, *o conditions --------------------------------------------

bool is_vowel(char32_t c) { return c == U'a' || c == U'e' || c == U'i' || c == U'o' || c == U'u'; }

/// Whether letter `c` at position `k` is a consonant, given whether the letter before it was.
/// nltk's _is_consonant recurses to the left for 'y' (a consonant at the start or after a vowel,
/// a vowel after a consonant); carrying the previous answer along gives the same result.
bool next_is_consonant(char32_t c, size_t k, bool previous_is_consonant) {
  if (is_vowel(c)) return false;
  if (c == U'y') return k == 0 || !previous_is_consonant;
  return true;
}

bool is_consonant(View w, size_t i) {
  bool cons = true;
  for (size_t k = 0; k <= i; ++k) cons = next_is_consonant(w[k], k, cons);
  return cons;
}

/// m(stem): the number of vowel-to-consonant transitions ("vc" pairs in the c/v pattern).
int measure(View w) {
  int m = 0;
  bool cons = true;
  for (size_t k = 0; k < w.size(); ++k) {
    bool now = next_is_consonant(w[k], k, cons);
    if (k > 0 && !cons && now) ++m;
    cons = now;
  }
  return m;
}

/// *v*: the stem contains a vowel.
bool contains_vowel(View w) {
  bool cons = true;
  for (size_t k = 0; k < w.size(); ++k) {
    cons = next_is_consonant(w[k], k, cons);
    if (!cons) return true;
  }
  return false;
}

/// *d: ends with two equal consonants.
bool ends_double_consonant(View w) {
  size_t n = w.size();
  return n >= 2 && w[n - 1] == w[n - 2] && is_consonant(w, n - 1);
}

/// *o: ends consonant-vowel-consonant, the last not w, x or y; NLTK_EXTENSIONS also accepts a
/// two-letter vowel-consonant word (so "are", "eve", "ice" keep their final e).
bool ends_cvc(View w) {
  size_t n = w.size();
  if (n >= 3) {
    return is_consonant(w, n - 3) && !is_consonant(w, n - 2) && is_consonant(w, n - 1) &&
           w[n - 1] != U'w' && w[n - 1] != U'x' && w[n - 1] != U'y';
  }
  return n == 2 && !is_consonant(w, 0) && is_consonant(w, 1);
}

bool ends_with(View w, View suffix) {
  return w.size() >= suffix.size() && w.substr(w.size() - suffix.size()) == suffix;
}

// ---- rule lists ------------------------------------------------------------------------------

/// The conditions the rule tables use; `stem` is the word without the suffix.
enum class Cond {
  kNone,            ///< unconditional
  kMeasureAbove0,   ///< m(stem) > 0
  kMeasureAbove1,   ///< m(stem) > 1
  kIon,             ///< m(stem) > 1 and the stem ends in s or t
  kYToI,            ///< [NLTK] len(stem) > 1 and the stem ends in a consonant
  kLogi,            ///< [NLTK] m(word minus "ogi") > 0: the l stays with the stem
  kDoubleL,         ///< m(word minus one l) > 1
};

struct Rule {
  View suffix;
  View replacement;
  Cond cond;
};

bool holds(Cond cond, View stem, View word) {
  switch (cond) {
    case Cond::kNone: return true;
    case Cond::kMeasureAbove0: return measure(stem) > 0;
    case Cond::kMeasureAbove1: return measure(stem) > 1;
    case Cond::kIon: return measure(stem) > 1 && (stem.back() == U's' || stem.back() == U't');
    case Cond::kYToI: return stem.size() > 1 && is_consonant(stem, stem.size() - 1);
    case Cond::kLogi: return measure(word.substr(0, word.size() - 3)) > 0;
    case Cond::kDoubleL: return measure(word.substr(0, word.size() - 1)) > 1;
  }
  return false;
}

/// nltk's _apply_rule_list: the FIRST rule whose suffix the word ends with decides. If its
/// condition fails the word is returned unchanged; later rules are not tried.
template <size_t N>
void apply_rules(Word& w, const Rule (&rules)[N]) {
  for (const Rule& r : rules) {
    if (!ends_with(w, r.suffix)) continue;
    View stem = View(w).substr(0, w.size() - r.suffix.size());
    if (!holds(r.cond, stem, w)) return;
    w.resize(stem.size());
    w.append(r.replacement);
    return;
  }
}

void replace_suffix(Word& w, size_t suffix_len, View replacement) {
  w.resize(w.size() - suffix_len);
  w.append(replacement);
}

// ---- the steps -------------------------------------------------------------------------------

constexpr Rule kStep1a[] = {
    {U"sses", U"ss", Cond::kNone},
    {U"ies", U"i", Cond::kNone},
    {U"ss", U"ss", Cond::kNone},
    {U"s", U"", Cond::kNone},
};

void step1a(Word& w) {
  // [NLTK] "ties" -> "tie", "dies" -> "die" (but "flies" -> "fli").
  if (ends_with(w, U"ies") && w.size() == 4) {
    replace_suffix(w, 3, U"ie");
    return;
  }
  apply_rules(w, kStep1a);
}

void step1b(Word& w) {
  // [NLTK] "died" -> "die", "spied" -> "spi"; nothing else of step 1b runs.
  if (ends_with(w, U"ied")) {
    replace_suffix(w, 3, w.size() == 4 ? U"ie" : U"i");
    return;
  }
  if (ends_with(w, U"eed")) {
    if (measure(View(w).substr(0, w.size() - 3)) > 0) w.pop_back();  // eed -> ee
    return;
  }
  size_t cut = 0;
  if (ends_with(w, U"ed") && contains_vowel(View(w).substr(0, w.size() - 2))) {
    cut = 2;
  } else if (ends_with(w, U"ing") && contains_vowel(View(w).substr(0, w.size() - 3))) {
    cut = 3;
  }
  if (cut == 0) return;
  w.resize(w.size() - cut);

  // Tidying of the stem left by -ed/-ing, again first-matching-rule-decides.
  if (ends_with(w, U"at") || ends_with(w, U"bl") || ends_with(w, U"iz")) {
    w.push_back(U'e');  // at -> ate, bl -> ble, iz -> ize
  } else if (ends_double_consonant(w)) {
    char32_t last = w.back();
    if (last != U'l' && last != U's' && last != U'z') w.pop_back();  // hopp -> hop, but fall stays
  } else if (measure(w) == 1 && ends_cvc(w)) {
    w.push_back(U'e');  // fil -> file
  }
}

void step1c(Word& w) {
  static constexpr Rule kRules[] = {{U"y", U"i", Cond::kYToI}};
  apply_rules(w, kRules);
}

constexpr Rule kStep2[] = {
    {U"ational", U"ate", Cond::kMeasureAbove0},
    {U"tional", U"tion", Cond::kMeasureAbove0},
    {U"enci", U"ence", Cond::kMeasureAbove0},
    {U"anci", U"ance", Cond::kMeasureAbove0},
    {U"izer", U"ize", Cond::kMeasureAbove0},
    {U"bli", U"ble", Cond::kMeasureAbove0},  // not the paper's abli -> able
    {U"alli", U"al", Cond::kMeasureAbove0},
    {U"entli", U"ent", Cond::kMeasureAbove0},
    {U"eli", U"e", Cond::kMeasureAbove0},
    {U"ousli", U"ous", Cond::kMeasureAbove0},
    {U"ization", U"ize", Cond::kMeasureAbove0},
    {U"ation", U"ate", Cond::kMeasureAbove0},
    {U"ator", U"ate", Cond::kMeasureAbove0},
    {U"alism", U"al", Cond::kMeasureAbove0},
    {U"iveness", U"ive", Cond::kMeasureAbove0},
    {U"fulness", U"ful", Cond::kMeasureAbove0},
    {U"ousness", U"ous", Cond::kMeasureAbove0},
    {U"aliti", U"al", Cond::kMeasureAbove0},
    {U"iviti", U"ive", Cond::kMeasureAbove0},
    {U"biliti", U"ble", Cond::kMeasureAbove0},
    {U"fulli", U"ful", Cond::kMeasureAbove0},  // [NLTK]
    {U"logi", U"log", Cond::kLogi},            // [NLTK]
};

void step2(Word& w) {
  // [NLTK] alli -> al is tried first, and its result goes through step 2 again; that second pass
  // cannot match alli (the word now ends in "al"), so it is the rule list below.
  if (ends_with(w, U"alli") && measure(View(w).substr(0, w.size() - 4)) > 0) replace_suffix(w, 4, U"al");
  apply_rules(w, kStep2);
}

constexpr Rule kStep3[] = {
    {U"icate", U"ic", Cond::kMeasureAbove0},
    {U"ative", U"", Cond::kMeasureAbove0},
    {U"alize", U"al", Cond::kMeasureAbove0},
    {U"iciti", U"ic", Cond::kMeasureAbove0},
    {U"ical", U"ic", Cond::kMeasureAbove0},
    {U"ful", U"", Cond::kMeasureAbove0},
    {U"ness", U"", Cond::kMeasureAbove0},
};

constexpr Rule kStep4[] = {
    {U"al", U"", Cond::kMeasureAbove1},    {U"ance", U"", Cond::kMeasureAbove1},
    {U"ence", U"", Cond::kMeasureAbove1},  {U"er", U"", Cond::kMeasureAbove1},
    {U"ic", U"", Cond::kMeasureAbove1},    {U"able", U"", Cond::kMeasureAbove1},
    {U"ible", U"", Cond::kMeasureAbove1},  {U"ant", U"", Cond::kMeasureAbove1},
    {U"ement", U"", Cond::kMeasureAbove1}, {U"ment", U"", Cond::kMeasureAbove1},
    {U"ent", U"", Cond::kMeasureAbove1},   {U"ion", U"", Cond::kIon},
    {U"ou", U"", Cond::kMeasureAbove1},    {U"ism", U"", Cond::kMeasureAbove1},
    {U"ate", U"", Cond::kMeasureAbove1},   {U"iti", U"", Cond::kMeasureAbove1},
    {U"ous", U"", Cond::kMeasureAbove1},   {U"ive", U"", Cond::kMeasureAbove1},
    {U"ize", U"", Cond::kMeasureAbove1},
};

void step5a(Word& w) {
  if (!ends_with(w, U"e")) return;
  View stem = View(w).substr(0, w.size() - 1);
  int m = measure(stem);
  if (m > 1 || (m == 1 && !ends_cvc(stem))) w.pop_back();
}

void step5b(Word& w) {
  static constexpr Rule kRules[] = {{U"ll", U"l", Cond::kDoubleL}};
  apply_rules(w, kRules);
}

/// nltk's irregular forms: these words map straight to their entry and skip the steps.
const char* irregular_form(const std::string& word) {
  static constexpr std::pair<std::string_view, const char*> kTable[] = {
      {"sky", "sky"},         {"skies", "sky"},       {"dying", "die"},
      {"lying", "lie"},       {"tying", "tie"},       {"news", "news"},
      {"innings", "inning"},  {"inning", "inning"},   {"outings", "outing"},
      {"outing", "outing"},   {"cannings", "canning"}, {"canning", "canning"},
      {"howe", "howe"},       {"proceed", "proceed"}, {"exceed", "exceed"},
      {"succeed", "succeed"},
  };
  for (const auto& [form, stem] : kTable) {
    if (word == form) return stem;
  }
  return nullptr;
}

}  // namespace

std::string porter_stem(const std::string& word) {
  // nltk looks the word up before lowercasing it; the table's words are lowercase, so a hit
  // means the lowercased word is the same.
  if (const char* stem = irregular_form(word)) return stem;
  // str.lower() first (nltk's default to_lowercase=True), but the length test is on the word as
  // given: lowercasing can lengthen it (U+0130).
  Word w = py::decode(py::lower(word));
  if (py::decode(word).size() <= 2) return py::encode(w);

  step1a(w);
  step1b(w);
  step1c(w);
  step2(w);
  apply_rules(w, kStep3);
  apply_rules(w, kStep4);
  step5a(w);
  step5b(w);
  return py::encode(w);
}

}  // namespace foundry::eval
