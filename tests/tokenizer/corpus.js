// Deterministic tokenizer test corpus: lines of text (as raw bytes, some of
// them invalid UTF-8) and a few multi-line documents. Everything comes from
// the samples below and a seeded generator, so every run builds the same
// bytes. Used by make-reference.js (tests) and bench/tokenizer-bench.sh.
'use strict';

// xorshift32: small, seedable, identical on every platform.
function rng(seed) {
  let s = seed >>> 0 || 1;
  const next = () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s;
  };
  const r = {
    u32: next,
    int: (n) => next() % n,
    pick: (a) => a[next() % a.length],
    chance: (p) => next() / 4294967296 < p,
  };
  return r;
}

const LATIN = [
  'Le cœur a ses raisons que la raison ne connaît point.',
  "L'été dernier, nous sommes allés à Génève voir l'exposition élégante.",
  'Über den Wolken muss die Freiheit wohl grenzenlos sein, sagte Jürgen Müßig.',
  'Größere Straßen führen außerhalb der Städte zu schönen Dörfern.',
  'El niño comió piña en la montaña; ¿quién lo sabía? ¡Nadie!',
  'A canção da avó emocionou a população da região de São João.',
  'Tiếng Việt có nhiều dấu: ả, ã, ạ, ầ, ẩ, ẫ, ậ, ở, ỡ, ợ, ừ, ữ.',
  'Zażółć gęślą jaźń, powiedział Łukasz w Łodzi.',
  'Příliš žluťoučký kůň úpěl ďábelské ódy.',
  'Çok güzel bir gün; İstanbul’da ılık bir rüzgâr esiyordu.',
  'Åsa och Øystein åt smørbrød på Ærø.',
  'Árvíztűrő tükörfúrógép és őszibarack.',
  'Ñandú, pingüino, acción, corazón — crème brûlée, façade, naïve, coöperate.',
  'Ǆemal and ǈubica wrote ǋ and ǌ in digraph form.',
];
const CYRILLIC = [
  'Съешь же ещё этих мягких французских булок, да выпей чаю.',
  'Широка страна моя родная, много в ней лесов, полей и рек.',
  'Україна — держава у Східній Європі; її столиця — Київ.',
  'Ёжик в тумане искал свою лошадку.',
  'Љубав и њежност, Ђорђе и Џемал — српска ћирилица.',
];
const GREEK = [
  'Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.',
  'Ἐν ἀρχῇ ἦν ὁ λόγος, καὶ ὁ λόγος ἦν πρὸς τὸν θεόν.',
  'Η γλώσσα μου έδωσαν ελληνική· το σπίτι φτωχικό.',
  'ΑΘΗΝΑ: Σήμερα ο καιρός είναι ηλιόλουστος; ναι!',
];
const ARABIC = [
  'اللغة العربية جميلة جداً، وهي لغة القرآن الكريم.',
  'بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ',
  'أهلاً وسهلاً بكم في مدينة القاهرة عام ٢٠٢٤.',
  'هل تتحدث الإنجليزية؟ نعم، قليلاً.',
];
const HEBREW = [
  'שָׁלוֹם עֲלֵיכֶם, מָה שְׁלוֹמְךָ הַיּוֹם?',
  'עברית היא שפה שמית; ירושלים היא עיר עתיקה.',
  'בְּרֵאשִׁית בָּרָא אֱלֹהִים אֵת הַשָּׁמַיִם וְאֵת הָאָרֶץ.',
];
const DEVANAGARI = [
  'हिन्दी भारत की एक प्रमुख भाषा है।',
  'नमस्ते! आप कैसे हैं? मैं ठीक हूँ, धन्यवाद।',
  'संस्कृतम् जगतः एकतमा अतिप्राचीना समृद्धा शास्त्रीया च भाषा अस्ति।',
  'क़ानून और ज़िंदगी में फ़र्क़ है — १२३४ रुपये।',
];
const THAI = [
  'ภาษาไทยเป็นภาษาที่มีวรรณยุกต์และไม่มีการเว้นวรรคระหว่างคำ',
  'สวัสดีครับ วันนี้อากาศดีมาก ไปเที่ยวกันไหม',
  'กรุงเทพมหานคร อมรรัตนโกสินทร์ มหินทรายุธยา',
];
const CJK = [
  '我们今天去公园散步，天气非常好。',
  '中华人民共和国成立于一九四九年十月一日。',
  '機械学習は人工知能の一分野です。東京は日本の首都である。',
  'ひらがなとカタカナ、そして漢字を使います。ｶﾀｶﾅもあります。',
  '「こんにちは」と彼は言った。『吾輩は猫である』',
  '臺灣的繁體字與簡體字不同：發／发，體／体。',
  '𠀀𠀁𠀂 are CJK Extension B ideographs; 𪚥 has four dragons.',
];
const KOREAN = [
  '한국어는 한글로 표기합니다. 세종대왕이 창제했습니다.',
  '안녕하세요? 저는 학생입니다. 만나서 반갑습니다!',
  '다람쥐 헌 쳇바퀴에 타고파.',
];
const OTHER_SCRIPTS = [
  'Հայերեն լեզու, ქართული ენა, ᠮᠣᠩᠭᠣᠯ ᠪᠢᠴᠢᠭ, ትግርኛ, ᏣᎳᎩ.',
  'தமிழ் மொழி, తెలుగు భాష, ಕನ್ನಡ, മലയാളം, বাংলা ভাষা, ગુજરાતી, ਪੰਜਾਬੀ.',
  'සිංහල, ພາສາລາວ, ភាសាខ្មែរ, မြန်မာဘာသာ, བོད་ཡིག, ދިވެހި.',
  'ᚠᚢᚦᚨᚱᚲ runes, 𐌰𐌱𐌲 Gothic, 𓀀𓁐 hieroglyphs, ꦄꦏ꧀ꦱꦫ Javanese.',
];
const CODE = [
  'int main(int argc, char **argv) { return argc > 1 ? atoi(argv[1]) : 0; }',
  '    for (size_t i = 0; i < n; i++) sum += a[i] * b[i];',
  '\tif (!p) { fprintf(stderr, "out of memory\\n"); goto fail; }',
  '#include <stdio.h>  // printf',
  'def fib(n: int) -> int:',
  '    return n if n < 2 else fib(n - 1) + fib(n - 2)',
  "        print(f'{name!r:>10} = {value:.3f}')  # formatted",
  'const add = (a, b) => a + b; console.log(`sum=${add(1, 2)}`);',
  'fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); println!("{:?}", v); }',
  'func (s *Server) Handle(w http.ResponseWriter, r *http.Request) error {',
  'SELECT id, name FROM users WHERE age >= 18 AND name LIKE \'%son\' ORDER BY id DESC;',
  '<div class="container"><a href="https://example.com/?q=1&amp;r=2">link</a></div>',
  'for f in *.txt; do wc -l "$f" | awk \'{print $1}\'; done 2>/dev/null',
  '{"id": 42, "tags": ["a", "b"], "nested": {"x": null, "y": true, "z": -1.5e-3}}',
  '    } else if (x->next != NULL && *p++ == \'\\0\') {',
  'public static void main(String[] args) throws IOException { List<String> xs = new ArrayList<>(); }',
  'x = [i**2 for i in range(100) if i % 3 == 0]; y = {k: v for k, v in zip(a, b)}',
  'matrix[i][j] += alpha * (A[i][k] - B[k][j]) / (1.0f + eps);',
  '$ git commit -m "Fix: handle \\r\\n in parser" && git push origin main',
  '@media (max-width: 600px) { .nav > li:hover::after { content: "→"; } }',
];
const CONTRACTIONS = [
  "I'm sure it's fine, isn't it? They're here; we've seen it.",
  "I'M SURE IT'S FINE, ISN'T IT? THEY'RE HERE; WE'VE SEEN IT.",
  "You'll see he'd go; she'D, we'Ll, they'Ve, it'S, I'm, I'M, i'm.",
  "'s 'S 't 'T 're 'RE 'Re 've 'VE 'm 'M 'll 'LL 'lL 'd 'D",
  "don't DON'T won't WON'T can't CAN'T shan't y'all Y'ALL o'clock",
  "rock 'n' roll, the '90s, 'tis, 'twas, ma'am, it's' 'quoted'",
  "it'ſ the long s; ﬁ ligature; İstanbul'S",
  "''s '''d ' s ' t it' s it 's",
];
const SPECIALS = ['<|im_start|>', '<|im_end|>', '<|endoftext|>', '<think>', '</think>', '<tool_call>',
  '</tool_call>', '<|vision_start|>', '<|image_pad|>', '<|fim_prefix|>', '<|fim_middle|>', '<|fim_suffix|>',
  '<tool_response>', '</tool_response>', '<|file_sep|>', '<|repo_name|>', '<|box_start|>', '<|quad_end|>'];
const NEAR_SPECIALS = ['<|im_start|', '<|im_start', '|im_end|>', '<|unknown|>', '<thinking>', '</ think>',
  '<|IM_START|>', '< |im_end|>', '<<|im_end|>>', '<|<|im_start|>|>', '<think></think>'];
const EMOJI = ['🙂', '😀', '🚀', '❤️', '❤', '👍', '👍🏽', '👍🏿', '👩‍💻', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇫🇷', '🇯🇵', '1️⃣',
  '#️⃣', '🧑🏻‍🤝‍🧑🏾', '🤷‍♀️', '👁️‍🗨️', '🐈‍⬛', '🫠', '🥲', '🪿', '😶‍🌫️', '♥︎', '☺', '✔️', '🔥🔥🔥', '👋🏼'];
const WORDS_EN = ['the', 'quick', 'brown', 'fox', 'jumps', 'over', 'lazy', 'dog', 'tokenizer', 'model', 'server',
  'inference', 'Qwen', 'byte', 'pair', 'encoding', 'merges', 'vocabulary', 'HELLO', 'World', 'naïve', 'résumé',
  'e-mail', 'state-of-the-art', 'U.S.A.', 'Dr.', 'Mr.', 'O\'Brien', 'McDonald\'s', 'iPhone', 'JavaScript'];
const PUNCT = ['.', ',', ';', ':', '!', '?', '...', '…', '—', '–', '-', '(', ')', '[', ']', '{', '}', '"', '“', '”',
  '«', '»', '‹', '›', '„', '‘', '’', '/', '\\', '|', '@', '#', '$', '%', '^', '&', '*', '+', '=', '~', '`', '§',
  '¶', '†', '‡', '•', '°', '±', '×', '÷', '€', '£', '¥', '₹', '₽', '¢', '©', '®', '™', '¿', '¡', '。', '、', '！', '？'];
const SPACES = [' ', '  ', '   ', '\t', '\t\t', ' \t ', '\u00a0', '\u3000', '\u2003', '\u2009', '\u202f', '\u205f',
  '\u1680', '\u180e', '\u200b', '\u2028', '\u2029', '\u0085', '\u000b', '\u000c', '\r', ' \r', '\r\r'];

// Ranges for random "printable" text, weighted toward what real text holds.
const RANDOM_RANGES = [
  [0x20, 0x7e, 30], [0xa0, 0x24f, 8], [0x250, 0x2ff, 2], [0x300, 0x36f, 4], [0x370, 0x3ff, 3],
  [0x400, 0x4ff, 4], [0x530, 0x58f, 1], [0x590, 0x5ff, 2], [0x600, 0x6ff, 3], [0x700, 0x7ff, 1],
  [0x900, 0x97f, 3], [0x980, 0xdff, 3], [0xe00, 0xe7f, 2], [0xe80, 0xfff, 1], [0x1000, 0x109f, 1],
  [0x10a0, 0x10ff, 1], [0x1100, 0x11ff, 2], [0x1200, 0x139f, 1], [0x1400, 0x167f, 1], [0x1780, 0x18af, 1],
  [0x1ab0, 0x1aff, 1], [0x1d00, 0x1dff, 1], [0x1e00, 0x1fff, 3], [0x2000, 0x206f, 2], [0x2070, 0x20cf, 1],
  [0x20d0, 0x20ff, 1], [0x2100, 0x23ff, 2], [0x2460, 0x27bf, 2], [0x2e80, 0x2fdf, 1], [0x3000, 0x30ff, 3],
  [0x3100, 0x31ff, 1], [0x3400, 0x4dbf, 1], [0x4e00, 0x9fff, 6], [0xa000, 0xa4cf, 1], [0xa640, 0xa6ff, 1],
  [0xa700, 0xa7ff, 1], [0xa800, 0xabff, 1], [0xac00, 0xd7a3, 4], [0xf900, 0xfaff, 1], [0xfb00, 0xfdff, 1],
  [0xfe00, 0xfe0f, 1], [0xfe20, 0xfe2f, 1], [0xfe30, 0xfeff, 1], [0xff00, 0xffef, 2], [0x10000, 0x1018f, 1],
  [0x10300, 0x104ff, 1], [0x10800, 0x10fff, 1], [0x11000, 0x11fff, 2], [0x13000, 0x1345f, 1],
  [0x16800, 0x16fff, 1], [0x1d400, 0x1d7ff, 1], [0x1e000, 0x1e8ff, 1], [0x1f000, 0x1f0ff, 1],
  [0x1f300, 0x1faff, 4], [0x20000, 0x2a6df, 1], [0x2a700, 0x2ee5f, 1], [0x30000, 0x323af, 1],
  [0xe0000, 0xe007f, 1],
];
const RANDOM_TOTAL = RANDOM_RANGES.reduce((a, r) => a + r[2], 0);
const ASSIGNED = /\p{Assigned}/u;

function randomChar(r) {
  for (;;) {
    let w = r.int(RANDOM_TOTAL);
    let i = 0;
    while (w >= RANDOM_RANGES[i][2]) w -= RANDOM_RANGES[i++][2];
    const [lo, hi] = RANDOM_RANGES[i];
    const cp = lo + r.int(hi - lo + 1);
    if (cp >= 0xd800 && cp < 0xe000) continue;
    const ch = String.fromCodePoint(cp);
    // Printable: assigned, not a line feed (lines are split on it), not a surrogate.
    if (cp === 0x0a || !ASSIGNED.test(ch)) continue;
    return ch;
  }
}

const utf8 = (s) => Buffer.from(s, 'utf8');

function shuffleWords(r, s) {
  const w = s.split(' ');
  for (let i = w.length - 1; i > 0; i--) {
    const j = r.int(i + 1);
    [w[i], w[j]] = [w[j], w[i]];
  }
  return w.join(' ');
}

function mutateCase(r, s) {
  switch (r.int(4)) {
    case 0: return s.toUpperCase();
    case 1: return s.toLowerCase();
    default: return s;
  }
}

// Returns {lines: [Buffer], docs: [{name, bytes: Buffer}]}.
function build(seed = 20240601) {
  const r = rng(seed);
  const lines = [];
  const add = (x) => {
    const b = Buffer.isBuffer(x) ? x : utf8(x);
    if (b.includes(0x0a)) throw new Error('corpus line holds a line feed: ' + JSON.stringify(String(x)));
    lines.push(b);
  };
  const naturals = [].concat(LATIN, CYRILLIC, GREEK, ARABIC, HEBREW, DEVANAGARI, THAI, CJK, KOREAN, OTHER_SCRIPTS);

  // 1. Natural text in many scripts: as written, NFD, NFKD, with case changes and shuffles.
  for (const s of naturals) {
    add(s);
    add(s.normalize('NFD'));
    add(s.normalize('NFKC'));
    add(' ' + s + '  ');
    for (let k = 0; k < 8; k++) {
      let t = mutateCase(r, shuffleWords(r, s));
      if (r.chance(0.5)) t = t.normalize('NFD');
      if (r.chance(0.3)) t = r.pick(SPACES) + t;
      if (r.chance(0.3)) t = t + r.pick(SPACES);
      add(t);
    }
  }
  // Mixed-script lines.
  for (let k = 0; k < 300; k++) {
    const n = 2 + r.int(4);
    const parts = [];
    for (let i = 0; i < n; i++) {
      const s = r.pick(naturals);
      const w = s.split(' ');
      const a = r.int(w.length);
      parts.push(w.slice(a, a + 1 + r.int(5)).join(' '));
      if (r.chance(0.4)) parts.push(r.pick(PUNCT));
      if (r.chance(0.2)) parts.push(r.pick(EMOJI));
    }
    let t = parts.join(r.chance(0.7) ? ' ' : r.pick(SPACES));
    if (r.chance(0.3)) t = t.normalize('NFD');
    add(t);
  }

  // 2. Code, with indentation by spaces and tabs and Windows line ends.
  for (const s of CODE) {
    add(s);
    add('\t' + s);
    add('        ' + s + '\r');
    add(s.replace(/ /g, '\t'));
    add(s + '   ');
  }
  for (let k = 0; k < 200; k++) {
    const s = r.pick(CODE);
    const indent = r.pick(['', ' ', '  ', '    ', '\t', '\t\t', '  \t', '            ']);
    add(indent + s + r.pick(['', '\r', ' ', '  // ' + r.pick(WORDS_EN), ' # ' + r.pick(naturals).slice(0, 12)]));
  }

  // 3. Numbers of all lengths and forms.
  for (let len = 1; len <= 64; len++) {
    let d = '';
    for (let i = 0; i < len; i++) d += String.fromCharCode(48 + (i === 0 ? 1 + r.int(9) : r.int(10)));
    add(d);
    add('x' + d + 'y');
    add(' ' + d + ' ');
    add('-' + d.slice(0, Math.ceil(len / 2)) + '.' + d.slice(Math.ceil(len / 2)) + 'e-' + len);
    add(d.replace(/\B(?=(\d{3})+(?!\d))/g, ','));
  }
  const digitSets = ['0123456789', '٠١٢٣٤٥٦٧٨٩', '۰۱۲۳۴۵۶۷۸۹', '०१२३४५६७८९', '০১২৩৪৫৬৭৮৯', '๐๑๒๓๔๕๖๗๘๙',
    '０１２３４５６７８９', '𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗', '⁰¹²³⁴⁵⁶⁷⁸⁹', '₀₁₂₃₄₅₆₇₈₉', '①②③④⑤⑥⑦⑧⑨⑩', 'ⅠⅡⅢⅣⅤⅥⅦⅧⅨⅩⅪⅫ', '〇一二三四五六七八九'];
  for (const set of digitSets) {
    const ds = [...set];
    for (let k = 0; k < 6; k++) {
      let s = '';
      const n = 1 + r.int(20);
      for (let i = 0; i < n; i++) s += r.pick(ds);
      add(s);
      add('total: ' + s + r.pick(PUNCT) + ' ' + r.pick(ds) + r.pick(ds));
    }
  }
  for (let k = 0; k < 150; k++) {
    const forms = [
      () => `${r.int(100000)}.${r.int(1000)}`,
      () => `0x${r.u32().toString(16).toUpperCase()}`,
      () => `${r.int(2100)}-${String(1 + r.int(12)).padStart(2, '0')}-${String(1 + r.int(28)).padStart(2, '0')}`,
      () => `+1 (${100 + r.int(900)}) ${100 + r.int(900)}-${1000 + r.int(9000)}`,
      () => `${r.int(1000)}%`,
      () => `$${r.int(1000000).toLocaleString('en-US')}.${String(r.int(100)).padStart(2, '0')}`,
      () => `${r.int(256)}.${r.int(256)}.${r.int(256)}.${r.int(256)}:${r.int(65536)}`,
      () => `v${r.int(10)}.${r.int(30)}.${r.int(100)}-rc${r.int(5)}`,
      () => `${r.int(10)}/${1 + r.int(9)} ≈ ${(r.int(1000) / 7).toFixed(6)}`,
      () => `1e${r.int(400) - 200}`,
      () => `${r.u32()}${r.u32()}${r.u32()}`,
    ];
    add(Array.from({ length: 1 + r.int(6) }, () => r.pick(forms)()).join(r.pick([' ', ', ', '; ', '\t', ''])));
  }

  // 4. Whitespace: runs, tabs, carriage returns, trailing spaces, Unicode spaces.
  for (let k = 0; k < 250; k++) {
    const n = 1 + r.int(8);
    let s = '';
    for (let i = 0; i < n; i++) {
      s += r.chance(0.6) ? r.pick(WORDS_EN) : r.pick(naturals).split(' ')[0];
      s += r.chance(0.5) ? r.pick(SPACES) : ' '.repeat(1 + r.int(12));
    }
    add(r.chance(0.3) ? r.pick(SPACES) + s : s);
  }
  for (const s of SPACES) {
    add(s);
    add(s.repeat(7));
    add('a' + s + 'b');
    add('a' + s + s + 'b');
    add(s + '1' + s);
    add("it's" + s + "'s" + s);
  }
  add('');
  add(' ');
  add('\r');
  add('\t');
  add('    \t    \r');

  // 5. Emoji: ZWJ sequences, skin tones, flags, keycaps, variation selectors.
  for (const e of EMOJI) {
    add(e);
    add(e + e + e);
    add('I ' + e + ' it' + e + '!');
    add(r.pick(naturals).slice(0, 20) + ' ' + e);
  }
  for (let k = 0; k < 120; k++) {
    const n = 1 + r.int(10);
    let s = '';
    for (let i = 0; i < n; i++) s += r.pick(EMOJI) + (r.chance(0.4) ? ' ' : '') + (r.chance(0.2) ? r.pick(WORDS_EN) : '');
    add(s);
  }

  // 6. Contractions in every case.
  for (const s of CONTRACTIONS) {
    add(s);
    add(s.toUpperCase());
    add(s.toLowerCase());
  }
  const cons = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"];
  for (let k = 0; k < 150; k++) {
    let c = r.pick(cons);
    c = [...c].map((ch) => (r.chance(0.5) ? ch.toUpperCase() : ch)).join('');
    const w = r.pick(WORDS_EN);
    add(r.pick([w + c, w + c + ' ' + r.pick(WORDS_EN), ' ' + c, c + c, w + ' ' + c + r.pick(PUNCT), r.pick(naturals).split(' ')[0] + c]));
  }

  // 7. Special tokens, mixed with text and with near misses.
  for (let k = 0; k < 250; k++) {
    const n = 1 + r.int(6);
    let s = '';
    for (let i = 0; i < n; i++) {
      const x = r.int(10);
      if (x < 4) s += r.pick(SPECIALS);
      else if (x < 5) s += r.pick(NEAR_SPECIALS);
      else if (x < 8) s += r.pick(WORDS_EN) + (r.chance(0.5) ? ' ' : '');
      else if (x < 9) s += r.pick(naturals).slice(0, 10);
      else s += r.pick(['\u0301', '\u0323\u0301', ' ', '  ', '\t', "'s", '\r', r.pick(EMOJI)]);
    }
    add(s);
  }
  add('<|im_start|>system You are a helpful assistant.<|im_end|><|im_start|>user Hi!<|im_end|><|im_start|>assistant');
  add('<think>\r</think>');
  add('<|im_start|>\u0301\u0323<|im_end|>e\u0301<think>');

  // 8. Random printable Unicode.
  for (let k = 0; k < 600; k++) {
    const n = 1 + r.int(r.chance(0.1) ? 400 : 60);
    let s = '';
    for (let i = 0; i < n; i++) s += r.chance(0.15) ? ' ' : randomChar(r);
    add(s);
  }

  // 9. Invalid UTF-8: stray continuation bytes, truncated and overlong
  // sequences, surrogates, bytes that never occur, mixed into valid text.
  const badBits = [[0x80], [0xbf], [0xc0, 0xaf], [0xc1, 0xbf], [0xc2], [0xe0, 0x80, 0x80], [0xe0, 0xa0], [0xe2, 0x82],
    [0xed, 0xa0, 0x80], [0xed, 0xbf, 0xbf], [0xf0, 0x80, 0x80, 0x80], [0xf0, 0x9f], [0xf0, 0x9f, 0x98], [0xf4, 0x90, 0x80, 0x80],
    [0xf5], [0xf8, 0x88, 0x80, 0x80, 0x80], [0xfe], [0xff], [0xc3, 0x28], [0xe2, 0x28, 0xa1], [0xf0, 0x28, 0x8c, 0xbc]];
  const invalid = [];
  const addInvalid = (b) => {
    invalid.push(b);
    add(b);
  };
  for (const b of badBits) {
    addInvalid(Buffer.from(b));
    addInvalid(Buffer.concat([utf8('abc'), Buffer.from(b), utf8('def')]));
    addInvalid(Buffer.concat([utf8('é'), Buffer.from(b), Buffer.from(b), utf8(' 🙂')]));
  }
  for (let k = 0; k < 150; k++) {
    const parts = [];
    const n = 1 + r.int(8);
    for (let i = 0; i < n; i++) {
      const x = r.int(4);
      if (x === 0) parts.push(Buffer.from(r.pick(badBits)));
      else if (x === 1) parts.push(Buffer.from(Array.from({ length: 1 + r.int(6) }, () => 0x80 + r.int(128))));
      else if (x === 2) parts.push(utf8(r.pick(naturals).slice(0, 1 + r.int(12))));
      else {
        // A valid character cut short.
        const c = utf8(randomChar(r) + randomChar(r));
        parts.push(c.subarray(0, Math.max(1, c.length - 1 - r.int(2))));
      }
    }
    const b = Buffer.concat(parts);
    addInvalid(Buffer.from(b.filter((x) => x !== 0x0a)));
  }

  // 10. Long lines of one character class (BPE and the pattern must stay linear).
  for (const [unit, count] of [['a', 20000], [' ', 20000], ['1', 20000], ['!', 20000], ['字', 8000], ['🙂', 5000],
    ['ab', 10000], [' a', 10000], ['\t', 10000], ['é', 8000], ['e\u0301', 6000], ["'s", 5000], ['\u3000', 8000]]) {
    add(unit.repeat(count));
  }

  // 11. A sweep over the code points (skipping surrogates and line feed), in
  // varied company so each one is seen next to letters, digits, spaces and marks.
  const company = ['', '', ' ', "'S", 'a', '1', '\u0323', '  ', '.'];
  let line = '';
  let inLine = 0;
  for (let cp = 0; cp <= 0x323af; cp++) {
    if ((cp >= 0xd800 && cp < 0xe000) || cp === 0x0a) continue;
    if (cp >= 0x2fa20 && cp < 0x30000) cp = 0x30000;
    line += String.fromCodePoint(cp) + r.pick(company);
    if (++inLine === 64) {
      add(line);
      line = '';
      inLine = 0;
    }
  }
  if (line) add(line);
  for (let cp = 0xe0000; cp < 0xe0200; cp += 32) {
    let s = 'tag';
    for (let c = cp; c < cp + 32; c++) s += String.fromCodePoint(c);
    add(s);
  }

  // Documents, encoded as a whole: chat transcripts, code with CRLF, prose
  // with blank lines and trailing spaces, invalid bytes, and a long mix.
  const docs = [];
  const chat = ['<|im_start|>system\nYou are Qwen, a helpful assistant.<|im_end|>\n'];
  for (let k = 0; k < 12; k++) {
    chat.push('<|im_start|>user\n' + r.pick(naturals) + '\n' + r.pick(CONTRACTIONS) + '<|im_end|>\n');
    chat.push('<|im_start|>assistant\n<think>\n' + r.pick(naturals) + '\n\n</think>\n\n' + r.pick(naturals) +
      ' ' + r.pick(EMOJI) + '<|im_end|>\n');
  }
  chat.push('<|im_start|>assistant\n');
  docs.push({ name: 'chat.txt', bytes: utf8(chat.join('')) });
  docs.push({ name: 'code-crlf.txt', bytes: utf8(CODE.join('\r\n') + '\r\n\r\n\r\n    \r\n') });
  docs.push({ name: 'code-tabs.txt', bytes: utf8(CODE.map((s) => '\t'.repeat(r.int(4)) + s).join('\n') + '\n\n\t\n') });
  docs.push({ name: 'prose.txt', bytes: utf8(naturals.map((s, i) => s + ' '.repeat(i % 4) + '\n'.repeat(1 + (i % 3))).join('')) });
  docs.push({ name: 'prose-nfd.txt', bytes: utf8(naturals.join('\n \n').normalize('NFD')) });
  docs.push({ name: 'spaces.txt', bytes: utf8(' \n\n  \n\t\n \r\n\r\n   a\n\n\n' + SPACES.join('\n') + '\n  ') });
  docs.push({ name: 'invalid.txt', bytes: Buffer.concat(invalid.filter((b, i) => i % 3 === 0).concat(
    badBits.map((b) => Buffer.from(b))).map((b) => Buffer.concat([b, Buffer.from([r.int(2) ? 0x0a : 0x20])]))) });
  const mix = [];
  for (let k = 0; k < 600; k++) mix.push(lines[r.int(lines.length)]);
  docs.push({ name: 'mix.txt', bytes: Buffer.concat(mix.map((b) => Buffer.concat([b, Buffer.from([0x0a])]))) });
  return { lines, docs };
}

module.exports = { build, rng };
