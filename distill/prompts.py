"""The distillation prompt sets, composed from templates x topics (no data set is downloaded).

Every prompt is a list of chat messages. Kinds: questions, explanations, lists, stories and poems,
advice, comparisons, code (write, explain, fix), rewriting and summarising a given text, and multi-turn
conversations (with short assistant turns written here). The held-out split is made by *topic*: its
topics, passages and code snippets never appear in a training prompt, so the measured acceptance is that
of a conversation the draft has not seen.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

Messages = list[dict[str, str]]

TOPICS = [
    # science and nature
    "photosynthesis", "black holes", "volcanoes", "the water cycle", "plate tectonics", "DNA", "vaccines",
    "the immune system", "climate change", "the moon's phases", "rainbows", "earthquakes", "gravity",
    "electricity", "magnetism", "the speed of light", "atoms", "the periodic table", "evolution",
    "bees and pollination", "coral reefs", "the human heart", "sleep", "dinosaurs", "the solar system",
    "tides", "clouds", "antibiotics", "the brain", "recycling", "renewable energy", "solar panels",
    "wind turbines", "bacteria", "viruses", "the ozone layer", "glaciers", "deserts", "rainforests",
    "migration of birds", "octopuses", "whales", "the northern lights", "comets", "Mars", "Jupiter",
    # technology
    "the internet", "smartphones", "artificial intelligence", "machine learning", "blockchain", "email",
    "cloud computing", "cybersecurity", "passwords", "databases", "web browsers", "GPS", "3D printing",
    "electric cars", "batteries", "robots", "video games", "open source software", "Wi-Fi",
    "computer memory", "operating systems", "compilers", "version control with git", "spreadsheets",
    # history and society
    "the Roman Empire", "ancient Egypt", "the printing press", "the Industrial Revolution",
    "the French Revolution", "the Silk Road", "the Renaissance", "the first moon landing",
    "the invention of the telephone", "democracy", "the United Nations", "money", "taxes", "inflation",
    "supply and demand", "the stock market", "banks", "trade", "cities", "public transport",
    "the Olympic Games", "languages", "libraries", "museums", "newspapers",
    # everyday life
    "cooking pasta", "baking bread", "making coffee", "healthy breakfast", "meal planning", "gardening",
    "houseplants", "keeping a dog", "adopting a cat", "saving money", "budgeting", "learning to swim",
    "running a marathon", "yoga", "meditation", "time management", "studying for exams",
    "job interviews", "writing a resume", "public speaking", "moving to a new city", "camping",
    "hiking in the mountains", "travelling on a budget", "packing for a trip", "learning a new language",
    "playing the guitar", "learning to draw", "photography", "reading more books", "cleaning the house",
    "organising a birthday party", "making friends", "working from home", "staying motivated",
    "drinking enough water", "reducing stress", "cycling to work", "buying a used car", "renting a flat",
    # arts and culture
    "jazz", "classical music", "poetry", "the novel", "theatre", "film making", "painting",
    "sculpture", "architecture", "fashion", "chess", "football", "basketball", "tennis", "board games",
    "mythology", "fairy tales", "comic books", "dance", "photography exhibitions",
]

# More topics for a second training set (distill-train-extra.jsonl), added when the held-out acceptance
# showed the head fitting the first set's topics (agreement 0.76 on replies it trained on, 0.62 on new
# prompts over the same topics, 0.57 on held-out topics). None of them is a held-out topic, nor close to one
# (build_extra_train_set checks the first; the second was checked by hand).
EXTRA_TOPICS = [
    # science and nature
    "photons", "quantum computing", "the Big Bang", "neutron stars", "the greenhouse effect", "fossils",
    "ocean currents", "hurricanes", "lightning", "the human skeleton", "muscles", "digestion", "hormones",
    "allergies", "the sense of smell", "colour blindness", "ants", "spiders", "sharks", "penguins",
    "elephants", "wolves", "mushrooms", "trees in autumn", "seeds", "soil", "wetlands", "mangroves",
    "the Amazon river", "the Sahara", "Antarctica", "Saturn's rings", "asteroids",
    "telescopes", "microscopes", "sound waves", "friction", "nuclear power",
    "hydrogen fuel", "water purification", "genetics", "cells", "stem cells", "nutrition", "vitamins",
    "the common cold", "first aid", "ageing",
    # technology
    "search engines", "social media", "online privacy", "encryption", "programming languages", "Python",
    "JavaScript", "APIs", "unit testing", "debugging", "data science", "statistics", "neural networks",
    "chatbots", "drones", "satellites", "QR codes",
    "barcodes", "printers", "keyboards", "touch screens", "virtual reality", "podcasts", "streaming music",
    "e-books", "online shopping", "digital cameras", "smart homes", "spam email", "backups",
    # history and society
    "ancient Greece", "the Vikings", "the Great Wall of China", "the Maya", "the Cold War",
    "the Wright brothers", "the steam engine", "the history of writing", "castles", "pirates",
    "elections", "human rights", "volunteering", "charity", "insurance", "mortgages", "credit cards",
    "small businesses", "marketing", "advertising", "negotiation", "teamwork", "leadership",
    "remote meetings", "customer service", "tourism", "farming", "fishing", "the postal service",
    # everyday life
    "making tea", "grilling vegetables", "vegetarian cooking", "baking cookies", "making soup",
    "growing tomatoes", "composting", "bird watching", "knitting", "woodworking", "fixing a bike",
    "painting a room", "morning routines", "journaling", "getting better sleep",
    "learning to code", "preparing for a job fair", "asking for a raise",
    "planning a wedding", "raising children", "talking to teenagers", "caring for elderly parents",
    "first day at a new job", "road trips", "flying with children", "visiting Japan", "visiting Italy",
    "learning to cook", "choosing running shoes", "stretching", "strength training", "swimming pools",
    "hiking safety", "saving energy at home", "living with roommates", "writing thank-you notes",
    # arts and culture
    "rock music", "hip hop", "opera", "the piano", "drums", "Shakespeare", "science fiction",
    "detective novels", "animation", "street art", "pottery", "origami", "magic tricks",
    "stand-up comedy", "crossword puzzles", "video game design", "cricket", "cycling races", "skiing",
]
EXTRA_CODE_TASKS = [
    "counts how often each word appears in a text", "checks whether a year is a leap year",
    "returns the longest word in a sentence", "converts minutes to hours and minutes",
    "finds all even numbers in a list", "reverses the order of words in a sentence",
    "computes the area of a circle", "checks whether a list is sorted", "generates a random password",
    "returns the intersection of two lists", "counts the lines in a string that contain a given word",
    "converts a number to its English ordinal (1st, 2nd, 3rd)",
]

CODE_TASKS = [
    "reverses a string", "checks whether a number is prime", "returns the n-th Fibonacci number",
    "counts the words in a sentence", "finds the largest number in a list", "removes duplicates from a list",
    "checks whether a word is a palindrome", "converts Celsius to Fahrenheit", "sorts a list of names",
    "computes the factorial of a number", "merges two sorted lists", "reads a text file and counts its lines",
    "returns the average of a list of numbers", "flattens a nested list", "counts vowels in a string",
    "checks whether two words are anagrams", "converts a binary string to an integer",
    "finds the second smallest element of a list", "capitalises every word in a sentence",
    "computes the greatest common divisor of two numbers", "groups words by their first letter",
    "returns the keys of a dictionary sorted by value", "validates a simple email address",
    "implements binary search", "simulates rolling two dice", "parses a date string like 2024-05-17",
    "computes the sum of the digits of a number", "rotates a list by k positions",
    "finds the most common character in a string", "converts a Roman numeral to an integer",
]
LANGUAGES = ["Python", "Python", "Python", "JavaScript", "C", "Rust", "Go", "Java", "TypeScript", "Bash"]

CODE_SNIPPETS = [
    "def add(a, b):\n    return a + b",
    "for i in range(10):\n    if i % 2 == 0:\n        print(i)",
    "def greet(name):\n    return f\"Hello, {name}!\"",
    "numbers = [3, 1, 2]\nnumbers.sort()\nprint(numbers[0])",
    "def mean(xs):\n    return sum(xs) / len(xs)",
    "x = 0\nwhile x < 5:\n    x += 1\nprint(x)",
    "def is_even(n):\n    return n % 2 == 1",
    "words = text.split()\ncounts = {}\nfor w in words:\n    counts[w] = counts.get(w, 0) + 1",
    "def last(items):\n    return items[len(items)]",
    "function square(x) {\n  return x * x;\n}",
    "const total = prices.reduce((a, b) => a + b, 0);",
    "SELECT name, age FROM users WHERE age > 30 ORDER BY age;",
    "def factorial(n):\n    if n == 0:\n        return 1\n    return n * factorial(n - 1)",
    "with open('data.txt') as f:\n    lines = f.readlines()",
    "squares = [x * x for x in range(5)]",
    "def divide(a, b):\n    return a / b",
    "int main() {\n    printf(\"%d\\n\", 2 + 3);\n    return 0;\n}",
    "let mut v = Vec::new();\nv.push(1);\nprintln!(\"{:?}\", v);",
]

PASSAGES = [
    "The city council met on Tuesday to discuss the new bike lanes. Many residents said the lanes would make "
    "cycling safer, while some shop owners worried that fewer parking spaces would hurt their business. The "
    "council agreed to test the lanes for six months before making a final decision.",
    "Our team finished the project two weeks late because the supplier delivered the parts after the agreed "
    "date. We have since found a second supplier and added a buffer of one week to every future schedule.",
    "Honey never spoils. Archaeologists have found pots of honey in ancient Egyptian tombs that are over three "
    "thousand years old and still perfectly edible. Its low water content and acidity keep bacteria away.",
    "The library will be closed for renovation from the first of June until the end of August. During this "
    "time, books can be borrowed from the temporary branch in the town hall, which is open every weekday.",
    "Regular exercise improves sleep, mood and concentration. Even a short walk of twenty minutes a day can "
    "lower the risk of heart disease and help people manage stress at work and at home.",
    "hey, just wanted to say the meeting tomorrow is moved to 3pm because the room is booked in the morning. "
    "bring the slides if u can, and tell sam too. thx",
    "The new phone has a larger screen, a faster processor and a camera that works better in low light. "
    "However, the battery lasts slightly less than the previous model, and the price has gone up by fifty dollars.",
    "Volunteers planted more than two thousand trees along the river last weekend. The project, organised by "
    "a local school, aims to reduce flooding and give birds and insects a new place to live.",
    "Remote work gives employees more flexibility and saves them time spent commuting. On the other hand, some "
    "people feel lonely, and teams can find it harder to share ideas without meeting in person.",
    "The recipe calls for two cups of flour, one cup of sugar, three eggs and a pinch of salt. Mix the dry "
    "ingredients first, then add the eggs one at a time, and bake for thirty minutes at 180 degrees.",
    "Sales rose by twelve percent in the third quarter, mainly thanks to strong demand in Asia. Costs also "
    "increased, so profit grew by only four percent. The company expects a quieter fourth quarter.",
    "The museum's new exhibition shows paintings by young artists from twenty countries. Visitors can vote for "
    "their favourite work, and the winner will receive a grant to study abroad for one year.",
    "I am writing to complain about the delivery of my order. The package arrived five days late and one of the "
    "cups inside was broken. I would like a replacement or a refund as soon as possible.",
    "Octopuses have three hearts and blue blood. They can change the colour and texture of their skin in a "
    "fraction of a second, which helps them hide from predators and surprise their prey.",
    "The train service between the two cities will run every thirty minutes from next month. Tickets can be "
    "bought online or at the station, and students get a discount of twenty percent.",
    "Learning to play an instrument takes patience. Most teachers recommend short daily practice sessions "
    "rather than one long session a week, because the brain learns best through regular repetition.",
    "Due to heavy snow, all schools in the district will remain closed on Friday. Parents will receive a text "
    "message if the closure is extended into next week.",
    "The software update fixes several bugs, improves battery life and adds a dark mode. Users are advised to "
    "back up their data before installing it, as the update cannot be undone.",
    "Bread rises because yeast eats sugar and releases carbon dioxide. The gas gets trapped in the dough, "
    "making it expand, and the heat of the oven sets the structure.",
    "our startup builds apps for small restaurants. the apps let customers order food and pay from their "
    "phones, and owners see which dishes sell best. we are looking for investors.",
    "The marathon attracted more than ten thousand runners this year. The winner finished in just over two "
    "hours, and many participants raised money for local charities.",
    "Bananas are berries, but strawberries are not. In botany, a berry is a fruit that develops from a single "
    "flower with one ovary, and strawberries grow from a flower with many ovaries.",
    "The hotel was clean and the staff were friendly, but the room was smaller than in the photos and the "
    "wifi kept disconnecting. Breakfast was excellent, with fresh fruit and local cheese.",
    "Starting next year, the company will offer every employee four extra days of holiday and a budget for "
    "training courses. Managers hope this will help keep staff for longer.",
]

AUDIENCES = ["a ten-year-old", "a beginner", "a busy manager", "a high-school student", "my grandmother",
             "a software engineer", "someone who has never heard of it"]
STYLES = ["formally", "in simpler words", "in a friendly tone", "more concisely", "as a short poem",
          "in the style of a news report", "for a children's book", "as bullet points"]
NUMBERS = ["three", "five", "four", "seven", "ten"]
FORMS = ["short story", "poem", "haiku", "limerick", "diary entry", "short dialogue", "fable", "song chorus"]
CHARACTERS = ["a curious robot", "a lonely lighthouse keeper", "a talking cat", "a young astronaut",
              "a clumsy dragon", "an old fisherman", "a detective", "two best friends", "a brave mouse"]

# Templates over one topic {t}; {a} audience, {n} a number word, {s} a style.
TOPIC_TEMPLATES = [
    "What is {t}?", "Can you explain {t} to {a}?", "Why is {t} important?", "How does {t} work?",
    "Tell me three interesting facts about {t}.", "Give me {n} tips about {t}.",
    "What are the pros and cons of {t}?", "Write a short paragraph about {t}.",
    "What are the most common misconceptions about {t}?", "Summarise the history of {t} in a few sentences.",
    "I want to learn about {t}. Where should I start?", "List {n} key terms related to {t} and define each.",
    "Write a tweet about {t}.", "Write a short blog post introduction about {t}.",
    "Explain {t} in one sentence.", "What questions should I ask an expert on {t}?",
    "Create a quiz with three questions about {t}, with answers.", "How would you teach {t} to {a}?",
    "Write a short {f} about {t}.", "Describe {t} using an analogy.",
    "What is the difference between {t} and {u}?", "Compare {t} and {u} in a short table.",
    "Write an email to a friend recommending they learn about {t}.", "What are the future trends in {t}?",
    "Give me a step-by-step guide to getting started with {t}.", "Is {t} overrated? Give a balanced answer.",
    "Explain {t}.", "Tell me about {t}.", "{t}: explain it briefly, please.",
]
STORY_TEMPLATES = [
    "Write a {f} about {c}.", "Tell me a bedtime story about {c}.", "Write a {f} about {c} and {t}.",
    "Write the opening paragraph of a novel about {c}.", "Invent a funny dialogue between {c} and {c2}.",
]
CODE_TEMPLATES = [
    "Write a {l} function that {task}.", "How do I write a program in {l} that {task}?",
    "Write a function that {task}. Use {l} and add comments.", "Show me {l} code that {task}, with an example.",
]
SNIPPET_TEMPLATES = [
    "Explain what this code does:\n\n{code}", "Is there a bug in this code?\n\n{code}",
    "Add comments to this code:\n\n{code}", "How can I make this code better?\n\n{code}",
    "Rewrite this code in a different programming language:\n\n{code}",
]
PASSAGE_TEMPLATES = [
    "Summarise this text in one sentence:\n\n{p}", "Rewrite the following text {s}:\n\n{p}",
    "What is the main point of this text?\n\n{p}", "Give this text a title:\n\n{p}",
    "Correct and improve the writing of this text:\n\n{p}", "List the key facts in this text:\n\n{p}",
    "Write a reply to this message:\n\n{p}", "Translate this text into simple English for {a}:\n\n{p}",
    "{p}\n\nSummarise the above in three bullet points.", "{p}\n\nTL;DR?",
]
# Multi-turn: (first user turn, short assistant turn, follow-up user turn), over a topic {t}.
MULTI_TURN = [
    ("What is {t}?", "{T} is a broad subject. In short, it is something many people find interesting, "
     "and there is a lot to say about how it works and why it matters.", "Can you give me a concrete example?"),
    ("Tell me about {t}.", "Sure! {T} has a long history and many practical uses. What would you like to know?",
     "Explain it to {a}, please."),
    ("I'm curious about {t}.", "Great topic! I can explain the basics, the history, or give you some tips.",
     "The basics, please, in {n} bullet points."),
    ("Give me {n} facts about {t}.", "Here are a few: it is widely studied, it has changed a lot over time, "
     "and it affects everyday life.", "Those are vague. Be more specific."),
    ("Write a short poem about {t}.", "Quiet thoughts of {t},\nturning slowly like the tide,\nteaching us to see.",
     "Now make it funny."),
    ("Explain {t} in one sentence.", "{T} is a subject that connects ideas, people and the world around us.",
     "Thanks. Why does it matter?"),
]
SYSTEMS = ["", "", "", "You are a helpful assistant.", "You are a concise assistant. Answer briefly.",
           "You are a friendly teacher."]


def _messages(user: str, system: str = "") -> Messages:
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]


def _compose(topics: list[str], code_tasks: list[str], snippets: list[str], passages: list[str],
             rng: random.Random, per_topic: int) -> Iterator[Messages]:
    """Prompts over the given topics/tasks/snippets/passages, in a seeded order."""
    def fill(template: str, topic: str, **values: str) -> str:
        other = rng.choice([t for t in topics if t != topic] or [topic])
        return template.format(t=topic, u=other, T=topic[:1].upper() + topic[1:], a=rng.choice(AUDIENCES),
                               n=rng.choice(NUMBERS), s=rng.choice(STYLES), f=rng.choice(FORMS),
                               c=rng.choice(CHARACTERS), c2=rng.choice(CHARACTERS), **values)

    for topic in topics:
        for template in rng.sample(TOPIC_TEMPLATES, min(per_topic, len(TOPIC_TEMPLATES))):
            yield _messages(fill(template, topic), rng.choice(SYSTEMS))
        for first, reply, follow in rng.sample(MULTI_TURN, 2):
            messages = _messages(fill(first, topic), rng.choice(SYSTEMS))
            messages += [{"role": "assistant", "content": fill(reply, topic)},
                         {"role": "user", "content": fill(follow, topic)}]
            yield messages
        yield _messages(fill(rng.choice(STORY_TEMPLATES), topic))
    for task in code_tasks:
        for template in CODE_TEMPLATES:
            yield _messages(fill(template, topics[0], l=rng.choice(LANGUAGES), task=task), rng.choice(SYSTEMS))
    for code in snippets:
        for template in SNIPPET_TEMPLATES:
            yield _messages(fill(template, topics[0], code=code))
    for passage in passages:
        for template in PASSAGE_TEMPLATES:
            yield _messages(fill(template, topics[0], p=passage), rng.choice(SYSTEMS))


def build_prompt_sets(seed: int = 0, held_out_fraction: float = 0.1, per_topic: int = 24
                      ) -> tuple[list[Messages], list[Messages]]:
    """(train, held_out): held-out prompts use topics, code tasks, snippets and passages of their own."""
    rng = random.Random(seed)

    def split(items: list[str]) -> tuple[list[str], list[str]]:
        items = list(items)
        rng.shuffle(items)
        cut = max(1, round(len(items) * held_out_fraction))
        return items[cut:], items[:cut]

    topics, held_topics = split(TOPICS)
    tasks, held_tasks = split(CODE_TASKS)
    snippets, held_snippets = split(CODE_SNIPPETS)
    passages, held_passages = split(PASSAGES)
    train = list(_compose(topics, tasks, snippets, passages, rng, per_topic))
    held_out = list(_compose(held_topics, held_tasks, held_snippets, held_passages, rng, per_topic))
    # Same-text duplicates (a template drawn twice for one topic) would only weight it twice.
    train = list({json.dumps(m, sort_keys=True): m for m in train}.values())
    seen = {json.dumps(m, sort_keys=True) for m in train}
    # A few templates name no topic ("a bedtime story about a talking cat"): keep those in training only.
    held_out = [m for key, m in {json.dumps(m, sort_keys=True): m for m in held_out}.items() if key not in seen]
    rng.shuffle(train)
    rng.shuffle(held_out)
    return train, held_out


def build_extra_train_set(seed: int = 0, per_topic: int = 24) -> list[Messages]:
    """A second training set over EXTRA_TOPICS and EXTRA_CODE_TASKS, with the training side's snippets
    and passages left out (the first set has them); nothing in it repeats a prompt of either set."""
    train, held_out = build_prompt_sets(seed=seed)
    clash = set(EXTRA_TOPICS) & set(TOPICS) or set(EXTRA_CODE_TASKS) & set(CODE_TASKS)
    if clash:
        raise ValueError(f"extra topics must be new: {sorted(clash)}")
    rng = random.Random(seed + 1)
    seen = {json.dumps(m, sort_keys=True) for m in train + held_out}
    extra = {}
    for messages in _compose(EXTRA_TOPICS, EXTRA_CODE_TASKS, [], [], rng, per_topic):
        key = json.dumps(messages, sort_keys=True)
        if key not in seen:
            extra[key] = messages
    prompts = list(extra.values())
    rng.shuffle(prompts)
    return prompts


def write_jsonl(path: Path, prompts: list[Messages]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as file:
        for index, messages in enumerate(prompts):
            file.write(json.dumps({"id": index, "messages": messages}, ensure_ascii=False) + "\n")


def read_jsonl(path: Path) -> list[Messages]:
    with Path(path).open(encoding="utf-8") as file:
        return [json.loads(line)["messages"] for line in file if line.strip()]


# Prompt sets that measure the draft and must never become training data.
HELD_OUT_FILES = ("distill-heldout.jsonl", "independent-heldout.jsonl")
HELD_OUT_MARK = "# Held out"  # a file whose first line starts so is held out too, whatever its name


def read_training_jsonl(path: Path) -> list[Messages]:
    """read_jsonl for prompts to train on: refuses a held-out set (HELD_OUT_FILES, or marked HELD_OUT_MARK)."""
    path = Path(path)
    with path.open(encoding="utf-8") as file:
        marked = file.readline().startswith(HELD_OUT_MARK)
    if marked or path.name in HELD_OUT_FILES:
        raise SystemExit(f"{path} is a held-out prompt set: it measures the draft and is never trained on")
    return read_jsonl(path)
