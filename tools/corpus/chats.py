#!/usr/bin/python3
"""Builds chat conversations in OpenAI's `messages` form from the corpus (tools/corpus/README.md).

    /usr/bin/python3 tools/corpus/chats.py --corpus DIR --out DIR [--seed 0]

Reads DIR/train.jsonl and DIR/valid.jsonl of build_corpus.py and WordNet's index and data
files, and writes chat_train.jsonl and chat_valid.jsonl: one {"kind", "messages", ["tools"],
["reasoning_effort"]} per line. Every assistant turn has a short reasoning_content (what was
asked and where the answer comes from) and the answer in content; tool conversations declare
functions, call them (tool_calls with JSON arguments), read the tool's result and answer.

Conversations are assigned to train or validation by their subject (the word, command, page,
city...), with the corpus's hash split, so no subject appears in both. Phrasings vary through
templates drawn from a random generator seeded with --seed: the output is a pure function of
the inputs and the seed.
"""
import argparse
import collections
import hashlib
import json
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sources  # noqa: E402
import textclean  # noqa: E402

VALID_PER_MILLE = 15


# --- small text helpers ------------------------------------------------------------------------

def first_sentences(text, limit=500):
    """The leading sentences of text, at most `limit` characters (at least one sentence)."""
    text = re.sub(r"\s+", " ", text).strip()
    out = ""
    for m in re.finditer(r".+?(?:[.!?](?=\s|$)|$)", text):
        s = m.group(0).strip()
        if out and len(out) + len(s) + 1 > limit:
            break
        out = (out + " " + s).strip()
    return out


def cap(s):
    return s[:1].upper() + s[1:]


def article(word):
    return "an" if word[:1].lower() in "aeiou" else "a"


class Picker:
    """Template choice from one seeded generator."""

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def one(self, options):
        return self.rng.choice(options)

    def chance(self, p):
        return self.rng.random() < p


# --- WordNet: word meanings --------------------------------------------------------------------

def wordnet_senses():
    """{lemma: [synset, ...]} in WordNet's sense order, for single lower-case words that occur
    in the sense-tagged corpus (tagsense_cnt > 0: the common words)."""
    synsets = {}
    for pos, s in sources.read_wordnet():
        synsets[(pos, s["offset"])] = s
    senses = collections.defaultdict(list)
    for pos in ("noun", "verb", "adj", "adv"):
        with open(os.path.join(sources.WORDNET_DIR, "index." + pos), encoding="utf-8") as f:
            for line in f:
                if line.startswith(" "):
                    continue
                f_ = line.split()
                lemma, p_cnt = f_[0], int(f_[3])
                tagged = int(f_[5 + p_cnt])
                offsets = f_[6 + p_cnt:]
                if tagged == 0 or not re.fullmatch(r"[a-z]{3,}", lemma):
                    continue
                senses[lemma] += [synsets[(pos, o)] for o in offsets if (pos, o) in synsets]
    return senses


def gloss_sentence(word, s):
    """One sentence saying what word means in synset s."""
    d = s["definition"].rstrip(".")
    if s["pos"] == "noun":
        if d.startswith(("a ", "an ", "the ", "any ", "one ", "someone ", "something ")):
            return f"{cap(article(word))} {word} is {d}."
        return f"{cap(word)} is {d}."
    if s["pos"] == "verb":
        return f"To {word} means to {d}." if not d.startswith("to ") else f"To {word} means {d}."
    return f"{cap(word)} means {d}."


def synonyms_of(word, s):
    return [w for w in s["words"] if w.lower() != word]


def define_answer(word, senses, pk):
    if len(senses) == 1 or pk.chance(0.5):
        s = senses[0]
        text = f"\"{cap(word)}\" ({s['pos']}): {s['definition']}." if pk.chance(0.3) else gloss_sentence(word, s)
        syn = synonyms_of(word, s)
        if syn and pk.chance(0.6):
            text += f" Synonyms: {', '.join(syn[:4])}."
        if s["examples"] and pk.chance(0.6):
            text += f" For example: \"{s['examples'][0]}\"."
        return text, "its most common sense"
    lines = [f"\"{cap(word)}\" has several meanings:"]
    for i, s in enumerate(senses[:3]):
        lines.append(f"{i + 1}. ({s['pos']}) {s['definition']}.")
    return "\n".join(lines), f"{min(3, len(senses))} of its senses"


DEFINE_Q = ["What does {w} mean?", "What does \"{w}\" mean?", "Define {w}.", "define {w}",
            "What is the meaning of the word \"{w}\"?", "Can you tell me what {w} means?", "Meaning of {w}?",
            "I came across the word \"{w}\". What does it mean?", "What's the definition of {w}?",
            "Explain the word \"{w}\".", "{w}: what does it mean?", "Please define the word {w}."]
DEFINE_R = ["The user asks what \"{w}\" means. I'll answer from the dictionary, giving {what}.",
            "A definition of \"{w}\" is wanted; WordNet has it, so I'll give {what}.",
            "They want the meaning of \"{w}\". I'll state {what}, as the dictionary does."]
SENTENCE_Q = ["Use {w} in a sentence.", "Can you use \"{w}\" in a sentence?", "Give me an example sentence with {w}.",
              "How would I use the word {w}?"]
SYNONYM_Q = ["What is another word for {w}?", "Give me a synonym for {w}.", "What are some synonyms of \"{w}\"?",
             "Which words mean the same as {w}?"]


def chat(kind, subject, messages, **extra):
    return dict({"kind": kind, "subject": subject, "messages": messages}, **extra)


def user(text):
    return {"role": "user", "content": text}


def assistant(reasoning, content, **extra):
    return dict({"role": "assistant", "reasoning_content": reasoning, "content": content}, **extra)


def define_chats(senses, pk):
    for word in sorted(senses):
        ss = senses[word]
        answer, what = define_answer(word, ss, pk)
        msgs = [user(pk.one(DEFINE_Q).format(w=word)),
                assistant(pk.one(DEFINE_R).format(w=word, what=what), answer)]
        examples = [e for s in ss for e in s["examples"] if re.search(r"\b" + word + r"\b", e)]
        if examples and pk.chance(0.25):  # a follow-up turn
            msgs += [user(pk.one(["Use it in a sentence.", "Can you give an example?", "How is it used?"])),
                     assistant(f"An example sentence with \"{word}\" is wanted; WordNet gives one.",
                               f"Here is one: \"{cap(examples[0])}.\"")]
        yield chat("define", "word:" + word, msgs)
        if examples and pk.chance(0.3):
            yield chat("sentence", "word:" + word, [
                user(pk.one(SENTENCE_Q).format(w=word)),
                assistant(f"The user wants \"{word}\" used in a sentence. I'll quote an example from the dictionary.",
                          f"{cap(examples[0])}." if pk.chance(0.5) else
                          f"For example: \"{examples[0]}\". Here \"{word}\" means {ss[0]['definition']}.")])
        syn = [w for s in ss[:2] for w in synonyms_of(word, s)]
        if syn and pk.chance(0.3):
            syn = list(dict.fromkeys(syn))[:4]
            yield chat("synonym", "word:" + word, [
                user(pk.one(SYNONYM_Q).format(w=word)),
                assistant(f"Synonyms of \"{word}\" are asked for; WordNet lists them with its senses.",
                          (f"Another word for {word} is \"{syn[0]}\"." if len(syn) == 1 else
                           f"Some synonyms of \"{word}\": {', '.join(syn)}."))])


# --- corpus-based questions ---------------------------------------------------------------------

def man_name_and_description(text):
    """(one-line summary, first paragraphs of DESCRIPTION) of a man page document."""
    sections = {}
    cur = None
    for para in text.split("\n\n"):
        if re.fullmatch(r"[A-Z][A-Z0-9 ,&/()-]*", para.strip()):
            cur = para.strip()
            sections[cur] = []
        elif cur:
            sections[cur].append(para)
    name = " ".join(sections.get("NAME", [])).strip()
    desc = "\n\n".join(p for p in sections.get("DESCRIPTION", []) if not p.startswith(" ") and len(p) > 40)
    return name, desc


MAN_Q = {"1": ["What does the `{n}` command do?", "What is {n} used for?", "Explain the {n} command.",
               "How does `{n}` work?", "What is `{n}` in Linux?", "Tell me about the {n} command."],
         "8": ["What does the `{n}` command do?", "What is {n} for?", "Explain the {n} command."],
         "2": ["What does the {n} system call do?", "Explain the `{n}` system call."],
         "3": ["What does the C function `{n}` do?", "What is {n}() in C?", "Explain the `{n}` function."],
         "5": ["What is the {n} file?", "What is the format of {n}?"],
         "7": ["What is {n}?", "Give me an overview of {n}."]}


def man_chats(docs, pk):
    for d in docs:
        base = d["id"][4:].split("#")[0]
        name, sec = base.rpartition(".")[0], base.rpartition(".")[2][:1]
        if sec not in MAN_Q or "::" in name:
            continue
        summary, desc = man_name_and_description(d["text"])
        m = re.match(r"(.+?)\s+[-\u2010-\u2014]+\s+(.+)", summary)
        if not m or not desc:
            continue
        what = m.group(2).rstrip(".")
        answer = f"`{name}` — {what}.\n\n{first_sentences(desc, pk.one([300, 500, 700]))}"
        yield chat("man", "man:" + name, [
            user(pk.one(MAN_Q[sec]).format(n=name)),
            assistant(f"The question is about `{name}`; its manual page (section {sec}) describes it, so I'll "
                      "summarise the NAME and DESCRIPTION sections.", answer)])


PY_Q = ["What is the Python {m} module for?", "What does the `{m}` module do in Python?", "Explain Python's {m} module.",
        "In Python, what is `{m}`?", "Tell me about the {m} module."]


def python_chats(docs, pk):
    for d in docs:
        m = re.match(r"python-doc:library/([a-z0-9_.]+)\.html$", d["id"])
        if not m:
            continue
        paras = d["text"].split("\n\n")
        title = re.match(r"([a-z0-9_.]+) [\u2014-]+ (.+)", paras[0])
        body = [p for p in paras[1:] if not p.startswith(("Source code:", "New in version", "Availability", "Deprecated"))
                and len(p) > 60 and textclean.letter_share(p) > 0.7]
        if not title or not body:
            continue
        mod = title.group(1)
        answer = f"`{mod}` — {title.group(2).rstrip('.')}.\n\n{first_sentences(body[0], 600)}"
        yield chat("python", "py:" + mod, [
            user(pk.one(PY_Q).format(m=mod)),
            assistant(f"This asks about the Python `{mod}` module; I'll answer from the Python documentation's "
                      "page for it.", answer)])


FOLDOC_Q = ["In computing, what is {t}?", "What is {t}?", "What does {t} mean in computing?", "Explain {t}."]
DEVIL_Q = ["What does the Devil's Dictionary say about {t}?", "Give me Ambrose Bierce's definition of {t}.",
           "How does the Devil's Dictionary define {t}?"]


def entry_chats(docs, pk, source, questions, reasoning, limit, at_most):
    """Questions about dictionary terms answered from their entries; at most at_most of them,
    chosen among the entries whose term is a word or two and whose text is not a bare expansion."""
    docs = [d for d in docs if re.fullmatch(r"[A-Za-z][A-Za-z -]{2,29}", d["id"].split(":", 1)[1].rstrip("+"))
            and len(d["text"]) > 120]
    for d in pk.rng.sample(docs, min(at_most, len(docs))):
        term = d["id"].split(":", 1)[1].rstrip("+")
        paras = [p for p in d["text"].split("\n\n")[1:] if len(p) > 30]
        if source == "devil":
            paras = [re.sub(r"^[A-Z ,.'-]+, [a-z. ]+\.\s*", "", d["text"].split("\n\n")[0])] + \
                d["text"].split("\n\n")[1:2]
        if not paras or not paras[0]:
            continue
        answer = first_sentences("\n".join(paras[:2]), limit)
        yield chat(source, f"{source}:{term.lower()}", [
            user(pk.one(questions).format(t=term)),
            assistant(reasoning.format(t=term), answer)])


FORTUNE_FILES = {"fortunes", "wisdom", "literature", "people", "humorists", "computers", "science", "education",
                 "work", "platitudes", "miscellaneous", "pets", "food", "art", "law", "linux", "magic",
                 "love", "riddles", "pratchett", "songs-poems", "startrek", "tao", "goedel", "paradoxum"}
FORTUNE_Q = ["Tell me a fortune.", "Give me a quote.", "Say something wise.", "Can you share a quotation?",
             "Give me a fortune cookie.", "I need some wisdom.", "Tell me something funny.", "Quote of the day?"]


def fortune_chats(docs, pk):
    for d in docs:
        parts = d["id"].split(":")
        if len(parts) < 3 or parts[1] not in FORTUNE_FILES or len(d["text"]) > 400:
            continue
        yield chat("fortune", d["id"], [
            user(pk.one(FORTUNE_Q)),
            assistant(pk.one(["The user wants a quotation; I'll pick one from the fortune collection.",
                              "A fortune is requested, so I'll share one from the fortune files."]), d["text"])])


GREETINGS = [("Hello!", "Hello! How can I help you today?"), ("Hi", "Hi! What would you like to know?"),
             ("Good morning.", "Good morning! What can I do for you?"),
             ("Who are you?", "I am a small language model trained on English text from Debian packages: "
                              "dictionaries, manuals and literature. I can define words, explain commands "
                              "and share quotations."),
             ("What can you do?", "I can explain what words mean, describe Linux commands and Python modules, "
                                  "share quotations, and call tools when they are available."),
             ("Thank you!", "You're welcome!"), ("Thanks.", "Glad to help."), ("Bye.", "Goodbye!")]


def greeting_chats(pk):
    for i in range(200):
        q, a = GREETINGS[i % len(GREETINGS)]
        yield chat("greeting", f"greet:{i}", [user(q), assistant("A short social message; I'll reply briefly.", a)])


# --- tool calls --------------------------------------------------------------------------------

def function(name, description, params, required):
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": {"type": "object", "properties": params,
                                                            "required": required}}}


TOOLS = {
    "get_weather": function("get_weather", "Get the current weather in a city.",
                            {"city": {"type": "string", "description": "City name, e.g. Paris"}}, ["city"]),
    "define_word": function("define_word", "Look up the meanings of an English word in the dictionary.",
                            {"word": {"type": "string", "description": "The word to define"}}, ["word"]),
    "lookup_command": function("lookup_command", "Get the one-line summary of a command's manual page.",
                               {"name": {"type": "string", "description": "Command name, e.g. ls"}}, ["name"]),
    "calculate": function("calculate", "Evaluate an arithmetic expression with + - * / and parentheses.",
                          {"expression": {"type": "string", "description": "e.g. (3 + 4) * 5"}}, ["expression"]),
}

CITIES = ["Paris", "London", "Berlin", "Madrid", "Rome", "Lisbon", "Vienna", "Prague", "Warsaw", "Oslo", "Stockholm",
          "Helsinki", "Copenhagen", "Dublin", "Amsterdam", "Brussels", "Zurich", "Athens", "Istanbul", "Cairo",
          "Nairobi", "Lagos", "Cape Town", "Casablanca", "Tokyo", "Osaka", "Seoul", "Beijing", "Shanghai",
          "Hong Kong", "Singapore", "Bangkok", "Hanoi", "Jakarta", "Manila", "Delhi", "Mumbai", "Karachi", "Dubai",
          "Tehran", "Moscow", "Kyiv", "Sydney", "Melbourne", "Auckland", "Toronto", "Montreal", "Vancouver",
          "New York", "Boston", "Chicago", "Denver", "Seattle", "San Francisco", "Los Angeles", "Miami", "Houston",
          "Mexico City", "Havana", "Bogota", "Lima", "Santiago", "Buenos Aires", "Sao Paulo", "Rio de Janeiro",
          "Reykjavik", "Edinburgh", "Munich", "Hamburg", "Milan", "Barcelona", "Marseille", "Lyon", "Krakow",
          "Budapest", "Bucharest", "Sofia", "Belgrade", "Zagreb", "Riga", "Vilnius", "Tallinn", "Anchorage",
          "Honolulu", "Phoenix", "Atlanta", "Dallas", "Ottawa", "Quebec", "Perth", "Brisbane", "Wellington"]
CONDITIONS = ["sunny", "partly cloudy", "cloudy", "light rain", "heavy rain", "foggy", "windy", "snowing",
              "thunderstorms", "clear"]


def weather_of(city):
    """The synthetic weather table: a fixed function of the city's name."""
    h = hashlib.sha256(city.encode()).digest()
    return {"city": city, "temperature_c": h[0] % 40 - 5, "condition": CONDITIONS[h[1] % len(CONDITIONS)],
            "humidity_percent": 30 + h[2] % 65}


def call(i, name, args):
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def tool_result(i, result):
    return {"role": "tool", "tool_call_id": f"call_{i}", "content": json.dumps(result)}


def declared(pk, needed):
    """The tools array: the needed ones plus sometimes others, in a shuffled order."""
    names = list(needed) + [n for n in TOOLS if n not in needed and pk.chance(0.4)]
    pk.rng.shuffle(names)
    return [TOOLS[n] for n in names]


WEATHER_Q = ["What's the weather in {c}?", "What is the weather like in {c} right now?", "Is it raining in {c}?",
             "How warm is it in {c} today?", "Weather in {c}?", "Should I take an umbrella in {c} today?"]


def weather_answer(w):
    return (f"In {w['city']} it is {w['temperature_c']} °C and {w['condition']}, with {w['humidity_percent']}% "
            "humidity.")


def weather_chats(pk):
    for city in CITIES:
        for k in range(8):
            w = weather_of(city)
            msgs = [user(pk.one(WEATHER_Q).format(c=city)),
                    assistant(f"The user asks about the weather in {city}. I'll call get_weather.", "",
                              tool_calls=[call(1, "get_weather", {"city": city})]),
                    tool_result(1, w),
                    assistant(f"The tool reports {w['temperature_c']} °C and {w['condition']} in {city}.",
                              weather_answer(w))]
            yield chat("tool-weather", "city:" + city, msgs, tools=declared(pk, ["get_weather"]))
        other = CITIES[(CITIES.index(city) + 7) % len(CITIES)]
        a, b = weather_of(city), weather_of(other)
        yield chat("tool-weather2", "city:" + city, [
            user(f"Compare the weather in {city} and {other}."),
            assistant(f"Two cities are asked about; I'll call get_weather for {city} and for {other}.", "",
                      tool_calls=[call(1, "get_weather", {"city": city}), call(2, "get_weather", {"city": other})]),
            tool_result(1, a), tool_result(2, b),
            assistant("Both results are in; I'll compare them.",
                      weather_answer(a) + " " + weather_answer(b) + " " +
                      (f"{city} is warmer." if a["temperature_c"] > b["temperature_c"] else
                       f"{other} is warmer." if b["temperature_c"] > a["temperature_c"] else
                       "Both have the same temperature."))], tools=declared(pk, ["get_weather"]))


def define_tool_chats(senses, pk, n):
    words = sorted(senses)
    for word in pk.rng.sample(words, n):
        ss = senses[word][:3]
        result = {"word": word, "senses": [{"pos": s["pos"], "definition": s["definition"]} for s in ss]}
        answer, _ = define_answer(word, ss, pk)
        yield chat("tool-define", "word:" + word, [
            user(pk.one(DEFINE_Q).format(w=word)),
            assistant(f"The user asks what \"{word}\" means; the define_word tool can look it up.", "",
                      tool_calls=[call(1, "define_word", {"word": word})]),
            tool_result(1, result),
            assistant(f"The dictionary returned {len(ss)} sense{'s' if len(ss) > 1 else ''}; I'll answer from it.",
                      answer)], tools=declared(pk, ["define_word"]))


def command_tool_chats(man_docs, pk, n):
    pages = []
    for d in man_docs:
        base = d["id"][4:].split("#")[0]
        if base.endswith(".1") or base.endswith(".8"):
            summary, _ = man_name_and_description(d["text"])
            m = re.match(r"(.+?)\s+[-\u2010-\u2014]+\s+(.+)", summary)
            if m:
                pages.append((base[:-2], m.group(2).rstrip(".")))
    for name, what in pk.rng.sample(pages, min(n, len(pages))):
        yield chat("tool-command", "man:" + name, [
            user(pk.one(MAN_Q["1"]).format(n=name)),
            assistant(f"The question is about the `{name}` command; lookup_command gives its summary.", "",
                      tool_calls=[call(1, "lookup_command", {"name": name})]),
            tool_result(1, {"name": name, "summary": what}),
            assistant("The manual page summary came back; I'll answer with it.",
                      f"`{name}` — {what}.")], tools=declared(pk, ["lookup_command"]))


def arithmetic(pk):
    a, b, c = pk.rng.randint(2, 99), pk.rng.randint(2, 99), pk.rng.randint(2, 20)
    form = pk.rng.randrange(4)
    if form == 0:
        return f"{a} + {b}", a + b
    if form == 1:
        return f"{a} * {b}", a * b
    if form == 2:
        return f"({a} + {b}) * {c}", (a + b) * c
    return f"{a * c} / {c}", a


CALC_Q = ["What is {e}?", "Calculate {e}.", "Compute {e} for me.", "How much is {e}?", "{e} = ?"]


def calc_chats(pk, n):
    for i in range(n):
        expr, value = arithmetic(pk)
        yield chat("tool-calc", f"calc:{i}", [
            user(pk.one(CALC_Q).format(e=expr)),
            assistant("An arithmetic question; I'll let the calculate tool evaluate it.", "",
                      tool_calls=[call(1, "calculate", {"expression": expr})]),
            tool_result(1, {"expression": expr, "result": value}),
            assistant(f"The tool computed {value}.", f"{expr} = {value}.")], tools=declared(pk, ["calculate"]))


def no_tool_chats(plain, pk, n):
    """Conversations with tools declared that the question does not need: answered directly."""
    for c in pk.rng.sample(plain, min(n, len(plain))):
        msgs = [dict(m) for m in c["messages"]]
        msgs[1]["reasoning_content"] += " No tool is needed for this."
        tools = [TOOLS[k] for k in sorted(TOOLS) if k not in ("define_word", "lookup_command") and pk.chance(0.7)] \
            or [TOOLS["get_weather"]]
        yield chat(c["kind"] + "-tools-unused", c["subject"], msgs, tools=tools)


# --- assembling ------------------------------------------------------------------------------

def read_corpus(corpus_dir):
    by_source = collections.defaultdict(list)
    for name in ("train.jsonl", "valid.jsonl"):
        with open(os.path.join(corpus_dir, name), encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                by_source[d["source"]].append(d)
    for docs in by_source.values():
        docs.sort(key=lambda d: d["id"])
    return by_source


def decorate(c, pk):
    """Some conversations get a system message or a lower thinking effort."""
    if pk.chance(0.1):
        c["messages"].insert(0, {"role": "system", "content": pk.one(
            ["You are a helpful assistant.", "Answer briefly and accurately.", "You are a concise, friendly helper."])})
    r = pk.rng.random()
    if r < 0.1:
        c["reasoning_effort"] = "low"
    elif r < 0.2:
        c["reasoning_effort"] = "high"
    return c


def build(corpus_dir, seed):
    pk = Picker(seed)
    docs = read_corpus(corpus_dir)
    senses = wordnet_senses()
    plain = []
    plain += define_chats(senses, pk)
    plain += man_chats(docs["man"], pk)
    plain += python_chats(docs["python-doc"], pk)
    plain += entry_chats(docs["foldoc"], pk, "foldoc", FOLDOC_Q,
                         "A computing term is asked about; I'll answer from the Free On-line Dictionary of "
                         "Computing's entry for {t}.", 500, 4000)
    plain += entry_chats(docs["jargon"], pk, "jargon", FOLDOC_Q,
                         "This asks about {t}; the Jargon File has an entry, which I'll summarise.", 500, 2000)
    plain += entry_chats(docs["devil"], pk, "devil", DEVIL_Q,
                         "The user wants Bierce's satirical definition of {t}; I'll quote the Devil's Dictionary.",
                         600, 1000)
    plain += fortune_chats(docs["fortunes"], pk)
    plain += greeting_chats(pk)
    tools = list(weather_chats(pk))
    tools += define_tool_chats(senses, pk, 1200)
    tools += command_tool_chats(docs["man"], pk, 600)
    tools += calc_chats(pk, 800)
    tools += no_tool_chats(plain, pk, 800)
    return [decorate(c, pk) for c in plain + tools]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", required=True, help="directory with train.jsonl and valid.jsonl")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    chats = build(args.corpus, args.seed)
    order = lambda c: hashlib.sha256(json.dumps(c, sort_keys=True).encode()).digest()  # noqa: E731
    split = {"train": [], "valid": []}
    for c in chats:
        split["valid" if textclean.is_validation(c["subject"], VALID_PER_MILLE) else "train"].append(c)
    counts = collections.Counter()
    for name, items in split.items():
        items.sort(key=order)
        path = os.path.join(args.out, f"chat_{name}.jsonl")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            for c in items:
                f.write(json.dumps(c, ensure_ascii=False) + "\n")
                counts[(name, c["kind"])] += 1
        os.replace(path + ".tmp", path)
    kinds = sorted({k for _, k in counts})
    for k in kinds:
        print(f"{k:28s} train {counts[('train', k)]:6d} valid {counts[('valid', k)]:5d}")
    print(f"{'total':28s} train {len(split['train']):6d} valid {len(split['valid']):5d}")


if __name__ == "__main__":
    main()
