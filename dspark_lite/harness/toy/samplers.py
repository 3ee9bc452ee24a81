"""The toy world's three domains as samplers (chapter 01): the phrase lists and the math, code and
chat samplers the corpus generator calls with its seeded `knobs.Rng` and `knobs.CorpusKnobs`.
Chat's choices are skewed by the prompt (`PromptSkew`).
"""
from __future__ import annotations

import hashlib
import math
from typing import Callable, Sequence

from .knobs import NAMES, PRONOUN, CorpusKnobs, Rng


# --------------------------------------------------------------------------------------
# math
ITEMS = (
    "apples", "marbles", "stickers", "pencils", "cookies", "stamps", "shells", "cards",
    "beads", "books", "oranges", "toy cars", "crayons", "buttons", "candles", "coins",
    "muffins", "plums", "ribbons", "tickets",
)
GOODS = ("notebook", "sandwich", "kite", "ball", "mug", "plant", "puzzle", "scarf", "lamp", "poster")
VEHICLES = ("train", "bus", "truck", "cyclist", "boat", "car")
CONTAINERS = (("box", "boxes"), ("bag", "bags"), ("pack", "packs"), ("jar", "jars"), ("crate", "crates"), ("basket", "baskets"))

STEP_SO = ("So", "That means", "Therefore")
STEP_TOTAL = ("In total", "Altogether", "All together")
STEP_ANSWER = ("The answer is", "So the answer is", "The final answer is")


def _explain(rng: Rng, k: CorpusKnobs, sentence: str) -> str:
    """The sentence and a newline with probability math_explain, else nothing."""
    return f"{sentence}\n" if rng.uniform() < k.math_explain else ""


def math_names(k: CorpusKnobs) -> tuple[str, ...]:
    """The first names math problems draw from."""
    return NAMES[: k.math_names]


def _math_buy_more(rng: Rng, k: CorpusKnobs) -> tuple[str, str]:
    name, item, (box, boxes) = rng.choice(math_names(k)), rng.choice(ITEMS), rng.choice(CONTAINERS)
    a, b, c = rng.int(2, k.math_max_number), rng.int(2, 9), rng.int(2, k.math_max_number)
    bc, total = b * c, a + b * c
    pron = PRONOUN[name]
    prompt = (f"{name} has {a} {item}. {pron.capitalize()} buys {b} {boxes} of {item} with "
              f"{c} {item} in each {box}. How many {item} does {name} have now?")
    e = k.math_phrase_entropy
    reply = (_explain(rng, k, "Let's solve this step by step.") + f"{name} starts with {a} {item}.\n"
             + _explain(rng, k, f"First, find how many {item} are in the {boxes}.")
             + f"Each {box} has {c} {item}, so {b} {boxes} have {b} x {c} = {bc} {item}.\n"
             + _explain(rng, k, f"Then add them to the {item} that {name} started with.")
             + f"{rng.canonical_or_other(STEP_TOTAL, e)} {name} has {a} + {bc} = {total} {item}.\n"
             f"{rng.canonical_or_other(STEP_ANSWER, e)} {total}.")
    return prompt, reply


def _math_change(rng: Rng, k: CorpusKnobs) -> tuple[str, str]:
    name, good = rng.choice(math_names(k)), rng.choice(GOODS)
    price, qty = rng.int(2, k.math_max_number), rng.int(2, 6)
    cost = price * qty
    paid = (cost // 10 + 1 + rng.int(0, 3)) * 10
    change = paid - cost
    prompt = (f"A {good} costs {price} dollars. {name} buys {qty} of them and pays with "
              f"{paid} dollars. How much change does {name} get?")
    e = k.math_phrase_entropy
    reply = (_explain(rng, k, "Let's solve this step by step.") + _explain(rng, k, f"First, find the cost of all the things {name} buys.")
             + f"One {good} costs {price} dollars.\n"
             f"{qty} of them cost {qty} x {price} = {cost} dollars.\n"
             + _explain(rng, k, f"Then take the cost away from the money {name} pays.")
             + f"{name} pays {paid} dollars.\n"
             f"{rng.canonical_or_other(STEP_SO, e)} the change is {paid} - {cost} = {change} dollars.\n"
             f"{rng.canonical_or_other(STEP_ANSWER, e)} {change}.")
    return prompt, reply


def _math_share(rng: Rng, k: CorpusKnobs) -> tuple[str, str]:
    name, item = rng.choice(math_names(k)), rng.choice(ITEMS)
    friends, each, kept = rng.int(2, 9), rng.int(2, max(3, k.math_max_number // 2)), rng.int(1, 9)
    rest = friends * each
    total = rest + kept
    pron = PRONOUN[name]
    prompt = (f"{name} has {total} {item}. {pron.capitalize()} keeps {kept} and shares the rest "
              f"equally among {friends} friends. How many {item} does each friend get?")
    e = k.math_phrase_entropy
    reply = (_explain(rng, k, "Let's solve this step by step.") + _explain(rng, k, f"First, take away the {item} that {name} keeps.")
             + f"{name} has {total} {item} and keeps {kept}.\n"
             f"{rng.canonical_or_other(STEP_SO, e)} {pron} shares {total} - {kept} = {rest} {item}.\n"
             + _explain(rng, k, f"Then split the rest of the {item} equally among the friends.")
             + f"Each of the {friends} friends gets {rest} / {friends} = {each} {item}.\n"
             f"{rng.canonical_or_other(STEP_ANSWER, e)} {each}.")
    return prompt, reply


def _math_travel(rng: Rng, k: CorpusKnobs) -> tuple[str, str]:
    vehicle = rng.choice(VEHICLES)
    speed, hours = rng.int(5, k.math_max_number), rng.int(2, 8)
    done = speed * hours
    left = rng.int(5, 3 * k.math_max_number)
    town = done + left
    prompt = (f"A {vehicle} travels {speed} miles every hour. It drives for {hours} hours toward "
              f"a town that is {town} miles away. How many miles are still left?")
    e = k.math_phrase_entropy
    reply = (_explain(rng, k, "Let's solve this step by step.") + _explain(rng, k, f"First, find how far the {vehicle} goes in that time.")
             + f"The {vehicle} travels {speed} miles every hour for {hours} hours.\n"
             f"It covers {speed} x {hours} = {done} miles.\n"
             + _explain(rng, k, "Then take that distance away from the distance to the town.")
             + f"The town is {town} miles away.\n"
             f"{rng.canonical_or_other(STEP_SO, e)} {town} - {done} = {left} miles are left.\n"
             f"{rng.canonical_or_other(STEP_ANSWER, e)} {left}.")
    return prompt, reply


def _math_week(rng: Rng, k: CorpusKnobs) -> tuple[str, str]:
    name = rng.choice(math_names(k))
    weekday, weekend, weeks = rng.int(2, max(3, k.math_max_number // 2)), rng.int(2, k.math_max_number), rng.int(2, 4)
    five, two = 5 * weekday, 2 * weekend
    week = five + two
    total = week * weeks
    prompt = (f"{name} reads {weekday} pages on every weekday and {weekend} pages on each day of "
              f"the weekend. How many pages does {name} read in {weeks} weeks?")
    e = k.math_phrase_entropy
    reply = (_explain(rng, k, "Let's solve this step by step.") + _explain(rng, k, f"First, count the pages {name} reads on the weekdays and on the weekend.")
             + f"On the 5 weekdays {name} reads 5 x {weekday} = {five} pages.\n"
             f"On the 2 weekend days {name} reads 2 x {weekend} = {two} pages.\n"
             + _explain(rng, k, "Then add them up to get the pages of one week.")
             + f"In one week that is {five} + {two} = {week} pages.\n"
             + _explain(rng, k, "Then multiply by the number of weeks.")
             + f"In {weeks} weeks that is {weeks} x {week} = {total} pages.\n"
             f"{rng.canonical_or_other(STEP_ANSWER, e)} {total}.")
    return prompt, reply


def _math_shop(rng: Rng, k: CorpusKnobs) -> tuple[str, str]:
    item = rng.choice(ITEMS)
    monday = rng.int(2, k.math_max_number)
    tuesday = 2 * monday
    left = rng.int(1, 2 * k.math_max_number)
    stock = monday + tuesday + left
    prompt = (f"A shop has {stock} {item}. It sells {monday} {item} on Monday and twice as many "
              f"on Tuesday. How many {item} are left?")
    e = k.math_phrase_entropy
    reply = (_explain(rng, k, "Let's solve this step by step.") + _explain(rng, k, f"First, find how many {item} the shop sells on the two days.")
             + f"On Monday the shop sells {monday} {item}.\n"
             f"On Tuesday it sells twice as many, 2 x {monday} = {tuesday} {item}.\n"
             f"{rng.canonical_or_other(STEP_TOTAL, e)} it sells {monday} + {tuesday} = {monday + tuesday} {item}.\n"
             + _explain(rng, k, f"Then take the {item} it sells away from the {item} it had.")
             + f"{rng.canonical_or_other(STEP_SO, e)} {stock} - {monday + tuesday} = {left} {item} are left.\n"
             f"{rng.canonical_or_other(STEP_ANSWER, e)} {left}.")
    return prompt, reply


MATH_PROBLEMS: tuple[Callable[[Rng, CorpusKnobs], tuple[str, str]], ...] = (
    _math_buy_more, _math_change, _math_share, _math_travel, _math_week, _math_shop,
)


def math_sample(rng: Rng, knobs: CorpusKnobs) -> tuple[str, str]:
    """One math word problem and its computed, worked solution."""
    return rng.choice(MATH_PROBLEMS)(rng, knobs)


# --------------------------------------------------------------------------------------
# code
# Each task: (name variants, description, predicate/transform code, python function).
_FILTERS = (
    ("even", "even", "{v} % 2 == 0", lambda x: x % 2 == 0),
    ("odd", "odd", "{v} % 2 == 1", lambda x: x % 2 == 1),
    ("positive", "positive", "{v} > 0", lambda x: x > 0),
    ("negative", "negative", "{v} < 0", lambda x: x < 0),
    ("big", "greater than ten", "{v} > 10", lambda x: x > 10),
    ("small", "smaller than five", "{v} < 5", lambda x: x < 5),
)
_MAPS = (
    ("squares", "the square of each number", "{v} * {v}", lambda x: x * x),
    ("doubles", "each number doubled", "2 * {v}", lambda x: 2 * x),
    ("increments", "each number plus one", "{v} + 1", lambda x: x + 1),
    ("absolutes", "the absolute value of each number", "abs({v})", abs),
    ("halves", "each number divided by two, rounded down", "{v} // 2", lambda x: x // 2),
)
PARAMS = ("numbers", "values", "items", "nums", "data", "xs")
LOOP_VARS = ("n", "x", "value", "item", "num", "v")
ACCS = ("total", "result", "acc", "count", "out", "answer")


def _code_list(rng: Rng) -> list[int]:
    return [rng.int(-5, 12) for _ in range(rng.int(3, 4))]


def _code_reduce(rng: Rng, k: CorpusKnobs) -> tuple[str, str]:
    key, words, cond, pred = rng.choice(_FILTERS)
    op = rng.choice(("sum", "count"))
    name = rng.canonical_or_other((f"{op}_{key}", f"{op}_of_{key}", f"{op}_{key}_numbers"), k.code_style_entropy)
    param = rng.choice(PARAMS)
    v = rng.canonical_or_other(LOOP_VARS, k.code_style_entropy)
    acc = rng.canonical_or_other(ACCS, k.code_style_entropy)
    what = "sum" if op == "sum" else "number"
    doc = f"Return the {what} of the {words} numbers in {param}." if words not in ("greater than ten", "smaller than five") \
        else f"Return the {what} of the numbers {words} in {param}."
    prompt = f"Write a Python function {name}({param}) that returns the {what} of the numbers in a list that are {words}."
    add = v if op == "sum" else "1"
    if rng.uniform() < k.code_style_entropy:
        expr = f"{v} for {v} in {param} if {cond.format(v=v)}" if op == "sum" else f"1 for {v} in {param} if {cond.format(v=v)}"
        body = f"    return sum({expr})\n"
    else:
        body = (f"    {acc} = 0\n    for {v} in {param}:\n        if {cond.format(v=v)}:\n"
                f"            {acc} += {add}\n    return {acc}\n")
    fn = (lambda xs: sum(x for x in xs if pred(x))) if op == "sum" else (lambda xs: sum(1 for x in xs if pred(x)))
    tests = "".join(f"assert {name}({xs}) == {fn(xs)}\n" for xs in (_code_list(rng), _code_list(rng)))
    return prompt, f'def {name}({param}):\n    """{doc}"""\n{body}\n\n{tests}'


def _code_map(rng: Rng, k: CorpusKnobs) -> tuple[str, str]:
    key, words, expr, fn = rng.choice(_MAPS)
    name = rng.canonical_or_other((key, f"list_of_{key}", f"get_{key}"), k.code_style_entropy)
    param = rng.choice(PARAMS)
    v = rng.canonical_or_other(LOOP_VARS, k.code_style_entropy)
    acc = rng.canonical_or_other(("result", "out", "mapped", "new_list"), k.code_style_entropy)
    prompt = f"Write a Python function {name}({param}) that returns a new list with {words}."
    if rng.uniform() < 1.0 - k.code_style_entropy:
        body = f"    return [{expr.format(v=v)} for {v} in {param}]\n"
    else:
        body = (f"    {acc} = []\n    for {v} in {param}:\n        {acc}.append({expr.format(v=v)})\n"
                f"    return {acc}\n")
    tests = "".join(f"assert {name}({xs}) == {[fn(x) for x in xs]}\n" for xs in (_code_list(rng), _code_list(rng)))
    return prompt, f'def {name}({param}):\n    """Return a new list with {words}."""\n{body}\n\n{tests}'


def _code_extreme(rng: Rng, k: CorpusKnobs) -> tuple[str, str]:
    kind = rng.choice(("largest", "smallest"))
    cmp = ">" if kind == "largest" else "<"
    name = rng.canonical_or_other((f"find_{kind}", f"{kind}_value", f"get_{kind}"), k.code_style_entropy)
    param = rng.choice(PARAMS)
    v = rng.canonical_or_other(LOOP_VARS, k.code_style_entropy)
    best = rng.canonical_or_other(("best", "current", "extreme", "winner"), k.code_style_entropy)
    prompt = f"Write a Python function {name}({param}) that returns the {kind} number in a non-empty list without using max or min."
    body = (f"    {best} = {param}[0]\n    for {v} in {param}[1:]:\n        if {v} {cmp} {best}:\n"
            f"            {best} = {v}\n    return {best}\n")
    fn = max if kind == "largest" else min
    tests = "".join(f"assert {name}({xs}) == {fn(xs)}\n" for xs in (_code_list(rng), _code_list(rng)))
    return prompt, f'def {name}({param}):\n    """Return the {kind} number in {param}."""\n{body}\n\n{tests}'


_WORDS = ("level", "python", "radar", "apple", "noon", "banana", "kayak", "river", "civic", "stone", "refer", "cloud")


def _code_string(rng: Rng, k: CorpusKnobs) -> tuple[str, str]:
    task = rng.int(0, 2)
    s = rng.canonical_or_other(("text", "s", "word", "string"), k.code_style_entropy)
    if task == 0:
        name = rng.canonical_or_other(("is_palindrome", "check_palindrome", "palindrome"), k.code_style_entropy)
        prompt = f"Write a Python function {name}({s}) that tells whether a word reads the same backwards."
        doc = f"Return True if {s} reads the same backwards."
        body = f"    return {s} == {s}[::-1]\n"
        fn: Callable = lambda w: w == w[::-1]
    elif task == 1:
        name = rng.canonical_or_other(("count_vowels", "vowel_count", "number_of_vowels"), k.code_style_entropy)
        c = rng.canonical_or_other(("ch", "c", "letter", "char"), k.code_style_entropy)
        prompt = f"Write a Python function {name}({s}) that counts the vowels in a string."
        doc = f"Return the number of vowels in {s}."
        body = f'    return sum(1 for {c} in {s} if {c} in "aeiou")\n'
        fn = lambda w: sum(1 for ch in w if ch in "aeiou")
    else:
        name = rng.canonical_or_other(("reverse_string", "reversed_text", "flip"), k.code_style_entropy)
        prompt = f"Write a Python function {name}({s}) that returns a string backwards."
        doc = f"Return {s} reversed."
        body = f"    return {s}[::-1]\n"
        fn = lambda w: w[::-1]
    tests = "".join(f"assert {name}({w!r}) == {fn(w)!r}\n" for w in rng.sample(_WORDS, 2))
    return prompt, f'def {name}({s}):\n    """{doc}"""\n{body}\n\n{tests}'


def _code_math(rng: Rng, k: CorpusKnobs) -> tuple[str, str]:
    task = rng.int(0, 2)
    n = rng.canonical_or_other(("n", "k", "number", "m"), k.code_style_entropy)
    acc = rng.canonical_or_other(ACCS, k.code_style_entropy)
    i = rng.canonical_or_other(("i", "j", "step"), k.code_style_entropy)
    if task == 0:
        name = rng.canonical_or_other(("factorial", "fact", "compute_factorial"), k.code_style_entropy)
        prompt = f"Write a Python function {name}({n}) that returns the factorial of {n}."
        body = f"    {acc} = 1\n    for {i} in range(2, {n} + 1):\n        {acc} *= {i}\n    return {acc}\n"
        doc, fn, args = f"Return {n} factorial.", math.factorial, rng.sample(range(1, 8), 2)
    elif task == 1:
        name = rng.canonical_or_other(("sum_to", "sum_up_to", "triangle_number"), k.code_style_entropy)
        prompt = f"Write a Python function {name}({n}) that returns the sum of the numbers from 1 to {n}."
        body = f"    {acc} = 0\n    for {i} in range(1, {n} + 1):\n        {acc} += {i}\n    return {acc}\n"
        doc, fn, args = f"Return 1 + 2 + ... + {n}.", lambda x: x * (x + 1) // 2, rng.sample(range(1, 30), 2)
    else:
        name = rng.canonical_or_other(("is_prime", "check_prime", "prime"), k.code_style_entropy)
        prompt = f"Write a Python function {name}({n}) that tells whether {n} is a prime number."
        body = (f"    if {n} < 2:\n        return False\n    for {i} in range(2, {n}):\n"
                f"        if {n} % {i} == 0:\n            return False\n    return True\n")
        doc, fn, args = f"Return True if {n} is prime.", lambda x: x > 1 and all(x % d for d in range(2, x)), rng.sample(range(2, 40), 2)
    tests = "".join(f"assert {name}({a}) == {fn(a)}\n" for a in args)
    return prompt, f'def {name}({n}):\n    """{doc}"""\n{body}\n\n{tests}'


CODE_TASKS = (_code_reduce, _code_map, _code_extreme, _code_string, _code_math)


def code_sample(rng: Rng, knobs: CorpusKnobs) -> tuple[str, str]:
    """One coding request and a function that fulfils it, with computed asserts."""
    return rng.choice(CODE_TASKS)(rng, knobs)


# --------------------------------------------------------------------------------------
# chat
# Topics: (request, subject noun, tip pool). Tips are the high-entropy spans: which tips, in
# which order, and inside each tip a free slot {a|b|c|d} that the target itself samples.
CHAT_TOPICS = (
    ("plan a trip to the coast", "trip", (
        "book your {train|bus|ferry|plane} tickets early", "pack a light {rain jacket|sweater|scarf|hat}",
        "visit the old harbour at {sunrise|sunset|noon|night}", "try the {fish soup|grilled sardines|lemon cake|fresh bread} at a small cafe",
        "walk along the {cliffs|beach|river|harbour} in the {afternoon|morning|evening|rain}",
        "keep some {cash|coins|snacks|water} for the markets", "check the {tide|bus|ferry|museum} times the day before",
        "stay in a {guest house|small hotel|hostel|cottage} near the {station|beach|centre|harbour}")),
    ("bake a loaf of bread", "bread", (
        "use {warm|cold|fresh|filtered} water for the dough", "let the dough rest for {an hour|two hours|a night|forty minutes}",
        "knead it until it feels {smooth|soft|elastic|springy}", "preheat the oven for {twenty|thirty|fifteen|forty} minutes",
        "add a pinch of {salt|sugar|honey|seeds} to the flour", "bake it on the {middle|lower|top|second} shelf",
        "let the loaf cool {before slicing it|on a rack|for an hour|under a towel}", "dust the top with a little {flour|oats|seeds|water}")),
    ("keep my basil plant alive", "plant", (
        "water it when the soil feels {dry|light|warm|dusty}", "give it {six|five|eight|seven} hours of sunlight",
        "pinch off the {flowers|buds|tips|stems} as they appear", "use a {clay|plastic|ceramic|wide} pot with drainage holes",
        "turn the pot every {few days|week|morning|other day}", "feed it {once a month|every two weeks|in spring|lightly}",
        "harvest the {top|young|large|outer} leaves first", "keep it away from {cold windows|the heater|strong wind|the oven}")),
    ("start running in the mornings", "running", (
        "begin with {short|easy|slow|gentle} runs", "buy a pair of {good|light|cheap|soft} shoes",
        "stretch {gently|slowly|well|briefly} after each run", "drink a glass of {water|juice|milk|tea} before you leave",
        "run with a {friend|neighbour|dog|group} for motivation", "rest on at least {two|three|one|four} days a week",
        "track your {distance|time|pace|mood} in a small notebook", "go to bed {a little earlier|on time|before ten|without your phone}")),
    ("study for a history exam", "exam", (
        "make a {timeline|map|chart|list} of the key events", "test yourself with {flash cards|a friend|old quizzes|short notes}",
        "study in {short|focused|quiet|regular} blocks with breaks", "explain each topic {out loud|to a friend|in writing|in one sentence}",
        "review your notes every {evening|morning|weekend|day}", "practise with old exam {questions|papers|essays|answers}",
        "sleep {well|early|enough|deeply} the night before", "form a small study {group|circle|team|pair}")),
    ("learn to play the guitar", "guitar", (
        "practise for {fifteen|twenty|ten|thirty} minutes every day", "learn {three|four|two|five} simple chords first",
        "keep your guitar {in tune|clean|in its case|near you}", "play along with songs you {love|know|hum|enjoy}",
        "use a {metronome|drum track|timer|tuner} to keep time", "trim your nails on the {left|right|fretting|picking} hand",
        "record yourself and listen {back|again|closely|later}", "take a short lesson with a {teacher|friend|video|neighbour}")),
    ("write a short story", "story", (
        "start with a character who wants {something|a secret|to leave|to win}", "write the first draft {quickly|by hand|in one sitting|at night}",
        "read your dialogue {out loud|twice|slowly|to a friend}", "cut the scenes that do not move the {plot|story|hero|ending}",
        "end with a {small surprise|quiet moment|question|twist}", "choose one clear point of {view|focus|conflict|tension}",
        "show the feelings through {actions|dialogue|details|gestures}", "ask a {friend|reader|teacher|neighbour} to read the draft")),
    ("save money on groceries", "budget", (
        "make a shopping list before you {go|leave|shop|plan}", "buy fruit and vegetables in {season|bulk|the market|the evening}",
        "cook large meals and freeze {portions|leftovers|half|soups}", "compare prices per {kilogram|litre|portion|item}",
        "avoid shopping when you are {hungry|tired|rushed|bored}", "choose the {store brand|plain version|bigger pack|loose fruit}",
        "plan your meals for the {week|weekend|month|next days}", "use what is already in the {fridge|freezer|cupboard|pantry}")),
    ("set up a small aquarium", "aquarium", (
        "let the water cycle for {two|three|four|six} weeks", "choose {hardy|small|calm|peaceful} fish for a start",
        "test the water every {week|few days|month|morning}", "add a few {live plants|stones|hiding places|shells}",
        "do not {overfeed|crowd|move|startle} the fish", "change a {quarter|fifth|third|little} of the water weekly",
        "keep the tank away from {direct sunlight|the radiator|the door|loud speakers}", "add the fish {a few at a time|slowly|in pairs|after a week}")),
    ("get better sleep", "sleep", (
        "keep the same {bedtime|routine|wake time|schedule} every night", "avoid screens for {an hour|two hours|a while|thirty minutes} before bed",
        "keep the bedroom {cool and dark|quiet|tidy|fresh}", "skip {coffee|tea|cola|chocolate} after lunch",
        "write down your {worries|plans|thoughts|tasks} before bed", "get some {daylight|fresh air|exercise|sun} in the morning",
        "keep naps {short|early|rare|under half an hour}", "read a {calm|short|paper|boring} book in bed")),
)
ASKS = ("Can you help me {req}?", "How do I {req}?", "I want to {req}. Any advice?", "What is the best way to {req}?")
# Multi-token openers that collide under a parallel drafter.
OPENERS = ("Of course!", "No problem!", "Sure thing!", "Absolutely!", "Great question!")
# Skip-word dependency: the verb depends on the adjective two tokens back ("happy to help").
AGREEMENT = (("happy", "help"), ("glad", "assist"), ("pleased", "explain"), ("delighted", "guide you"), ("eager", "chip in"))
# The same kind of dependency after a tip: the last word agrees with the verb two words back.
REMARKS = (("keeps", "motivated"), ("saves", "time"), ("helps", "relax"), ("gives", "energy"), ("makes", "stronger"))
LEADS = ("Here are a few ideas.", "Here is what works well.", "These tips should help.", "Try these steps.", "A few things matter most.")
ORDINALS = (("First,", "To start,", "Begin by making sure to", "Step one:", "Most importantly,"),
            ("Next,", "Then,", "After that,", "Also,", "Second,"),
            ("Beyond that,", "In addition,", "Besides,", "Another idea:", "As well,"),
            ("On top of that,", "What is more,", "Moreover,", "It also helps to", "Try to"),
            ("Plus,", "Also remember to", "Do not forget to", "It is wise to", "You can also"))
FINALS = ("Finally,", "Lastly,", "Last of all,", "And of course,", "One more thing:")
CLOSERS = ("I hope this helps!", "Hope that helps!", "Let me know how it goes!", "Good luck!", "Have fun with it!")
WISHES = ("Enjoy your {noun}!", "Good luck with your {noun}!", "Have fun with your {noun}!", "All the best with your {noun}!", "I hope your {noun} goes well!")


class PromptSkew:
    """The chat choices of one prompt: every choice point ranks its options in an
    order that a hash of (prompt, choice point) fixes, and draws rank r with weight 1 / r ** skew.
    At skew 0 every draw is `Rng.choice`, uniform, exactly as before the knob existed."""

    def __init__(self, rng: Rng, prompt_key: str, skew: float) -> None:
        self.rng, self.key, self.skew = rng, prompt_key, skew

    def weights(self, n: int, point: str) -> list[float]:
        """Weight of each of n options at this choice point (uniform at skew 0)."""
        digest = hashlib.sha256(f"{self.key}/{point}".encode()).digest()
        ranks = sorted(range(n), key=lambda i: (digest[i % len(digest)], i))  # rank -> option
        weights = [0.0] * n
        for rank, option in enumerate(ranks):
            weights[option] = 1.0 / (rank + 1) ** self.skew
        return weights

    def choice(self, options: Sequence, point: str):
        if self.skew == 0.0:
            return self.rng.choice(options)
        return options[self.rng.weighted_index(self.weights(len(options), point))]

    def sample(self, options: Sequence, k: int, point: str) -> list:
        """k distinct options in drawn order (without replacement, each draw skewed)."""
        if self.skew == 0.0:
            return self.rng.sample(options, k)
        pool, weights, chosen = list(options), self.weights(len(options), point), []
        for _ in range(k):
            index = self.rng.weighted_index(weights)
            chosen.append(pool.pop(index))
            weights.pop(index)
        return chosen


def fill_slots(skew: PromptSkew, template: str, options: int) -> str:
    """Replace every {a|b|c|d} slot by one of its first `options` alternatives."""
    parts = template.split("{")
    out = [parts[0]]
    for index, part in enumerate(parts[1:]):
        slot, rest = part.split("}", 1)
        out.append(skew.choice(slot.split("|")[:options], f"slot/{template}/{index}") + rest)
    return "".join(out)


def chat_remark(skew: PromptSkew, knobs: CorpusKnobs, point: str) -> str:
    """ "It <verb> you <word>, <verb> you <word> and <verb> you <word>." with three different
    verbs; each word agrees with its verb (with probability chat_skip_dependency), two tokens
    after it."""
    rng, pool = skew.rng, REMARKS[: knobs.chat_branching]
    clauses = []
    for verb, word in skew.sample(pool, min(3, knobs.chat_branching), f"remark/{point}"):
        if rng.uniform() >= knobs.chat_skip_dependency:
            word = rng.choice(pool)[1]
        clauses.append(f"{verb} you {word}")
    listed = clauses[0] if len(clauses) == 1 else f"{', '.join(clauses[:-1])} and {clauses[-1]}"
    return f"It {listed}."


def chat_sample(rng: Rng, knobs: CorpusKnobs) -> tuple[str, str]:
    """One open-ended request and a reply with branching phrasings and free-choice tips, each
    choice skewed by the prompt (`CorpusKnobs.chat_skew`)."""
    b = knobs.chat_branching
    topic = rng.int(0, len(CHAT_TOPICS) - 1)
    request, noun, tips = CHAT_TOPICS[topic]
    ask = rng.int(0, len(ASKS) - 1)
    prompt = ASKS[ask].format(req=request)
    skew = PromptSkew(rng, f"{topic}/{ask}", knobs.chat_skew)
    adjective, verb = skew.choice(AGREEMENT[:b], "agreement")
    if rng.uniform() >= knobs.chat_skip_dependency:  # break the agreement on purpose
        verb = rng.choice(AGREEMENT[:b])[1]

    def remark(line: str, point: str) -> str:
        return f"{line} {chat_remark(skew, knobs, point)}" if rng.uniform() < knobs.chat_remarks else line

    opening = f"{skew.choice(OPENERS[:b], 'opener')} I would be {adjective} to {verb}. {skew.choice(LEADS[:b], 'lead')}"
    lines = [remark(opening, "opening")]
    chosen = skew.sample(tips, knobs.chat_tips, "tips")
    for i, tip in enumerate(chosen):
        ordinal = FINALS if i == len(chosen) - 1 and i > 0 else ORDINALS[i]
        text = f"{skew.choice(ordinal[:b], f'ordinal/{i}')} {fill_slots(skew, tip, knobs.chat_slot_options)}."
        lines.append(remark(text, f"tip/{i}"))
    lines.append(f"{skew.choice(CLOSERS[:b], 'closer')} {skew.choice(WISHES[:b], 'wish').format(noun=noun)}")
    return prompt, "\n".join(lines)


SAMPLERS: dict[str, Callable[[Rng, CorpusKnobs], tuple[str, str]]] = {
    "math": math_sample, "code": code_sample, "chat": chat_sample,
}
