"""Prompts of many shapes for the lasting corpus (corpus.py), written apart from prompts.py's templates.

prompts.py composes every prompt as a template x a topic, so its held-out split measures the training
distribution. Here each kind of prompt starts from text written by hand for its own sake (questions as
people type them, conversations, passages, code, problems, sentences in other languages) and varies it
the way users do: a greeting or none, lower case, a request for brevity or for steps, a task put to a
passage or a snippet, numbers drawn anew in a word problem. None of it is taken from a held-out set
(HELD_OUT_FILES in prompts.py); tests check that no held-out prompt's text appears here.

`corpus_prompts(seed)` yields a long stream; the first few hundred cover every kind evenly. Kinds with few
variations (other languages, conversations) run out first, and past about 600 prompts the stream is
mostly everyday questions and word problems: to widen it, add hand-written seeds to any list here. That
reorders the stream, which is safe: corpus.grow_corpus skips every prompt already in a shard by its text.
Each prompt is {"kind": str, "messages": Messages}.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from distill.prompts import Messages

QUESTIONS = [
    "what's the difference between baking soda and baking powder",
    "Is it bad to charge my phone overnight?",
    "how long should I boil an egg if I want the yolk a bit runny",
    "Why do cats knead blankets?",
    "Can you explain what a mortgage offset account is? My bank keeps mentioning it.",
    "why is the sky darker in winter evenings even when it's clear",
    "How many hours of sleep does a teenager actually need?",
    "I keep getting cramp in my calf at night. Any idea why and what helps?",
    "What should I check before signing a gym contract?",
    "Is it worth learning touch typing at 40?",
    "how do noise cancelling headphones work",
    "My sourdough starter smells like nail polish remover. Is it dead?",
    "What's a good way to remember people's names when I meet them?",
    "Why do onions make you cry and is there a trick to stop it?",
    "explain compound interest with a simple example please",
    "What happens to my pension if I move abroad? I live in Ireland.",
    "Should I stretch before or after running?",
    "How do I get candle wax out of a carpet?",
    "what's the point of a credit score and how do I improve mine",
    "Why does bread go stale faster in the fridge?",
    "Is there a polite way to leave a group chat?",
    "how do solar eclipses work and when is the next one visible in Europe",
    "What are some cheap hobbies I can do in a small flat?",
    "My toddler refuses vegetables. What actually works?",
    "Why do my glasses fog up when I wear a mask and how do I stop it?",
    "How can I tell if an email is a phishing attempt?",
    "What is the difference between a virus and a bacterium, in simple terms?",
    "ok dumb question but why do we have leap years",
    "What should I pack for a three-day hike in autumn?",
    "How do I start running if I'm really unfit?",
    "Can dogs eat grapes?",
    "I have a job offer with a higher salary but a longer commute. How should I think about it?",
    "whats the best way to store fresh herbs so they last",
    "How do I ask my manager for a raise without sounding pushy?",
    "Why is my tomato plant's fruit splitting?",
    "What is inflation and why do central banks raise interest rates to fight it?",
    "How can I make my small bathroom look bigger?",
    "Is it safe to eat rice that was left out overnight?",
    "What are the pros and cons of a standing desk?",
    "how to fix a squeaky door hinge without WD-40",
    "Why do some people get motion sickness and others don't?",
    "What's a reasonable monthly budget for groceries for two adults?",
    "Explain how a bill becomes law, briefly.",
    "I'm nervous about flying. What actually keeps a plane in the air?",
    "How do I tell my friend their breath smells without hurting them?",
    "Which is healthier, brown rice or white rice?",
    "How do vaccines get tested before they're approved?",
    "Why does my laptop get so hot when I watch videos?",
    "Give me three ideas for a rainy Sunday with two kids aged 5 and 9.",
    "What does 'APR' mean on a loan?",
    "Is it better to rent or buy a house right now? I know it depends, but on what?",
    "How do I clean a cast iron pan after cooking fish?",
    "Why do my ears pop on a plane?",
    "How can I stop procrastinating on a big writing project?",
    "What should I say in a thank-you note to a teacher who is retiring?",
    "Is a 10-minute walk after dinner actually good for you?",
    "How do I get my cat to stop scratching the sofa?",
    "why do we yawn",
    "What's the safest way to defrost chicken?",
    "How do electric kettles know when to switch off?",
    "My Wi-Fi drops every evening around 8. What could cause that?",
    "what's a good first programming language for a 12 year old",
    "How do I politely decline a wedding invitation?",
    "Can you help me plan a week of vegetarian dinners that take under 30 minutes?",
    "Why are bananas curved?",
    "How do I read a nutrition label quickly?",
    "Should I replace my car's timing belt at 100,000 km even if it seems fine?",
    "What are good questions to ask at the end of a job interview for a nurse position?",
]

OPENERS = ["", "", "", "hi! ", "Hello, ", "quick question: ", "Hey, ", "I was wondering: ", "Please help. "]
CLOSERS = ["", "", "", " Thanks!", " Keep it short.", " Explain it step by step.", " Answer in one paragraph.",
           " Give me a list.", " Explain it like I'm twelve.", " Be honest.", " thx"]

CONVERSATIONS: list[Messages] = [
    [{"role": "user", "content": "I want to start journaling but I never know what to write."},
     {"role": "assistant", "content": "A simple start is three lines a day: what happened, how you felt, and "
                                      "one thing you're looking forward to."},
     {"role": "user", "content": "That sounds doable. Should I write in the morning or at night?"}],
    [{"role": "user", "content": "What's a haiku?"},
     {"role": "assistant", "content": "A haiku is a short Japanese poem of three lines, traditionally with "
                                      "five, seven and five syllables."},
     {"role": "user", "content": "Write one about a bus stop in the rain."}],
    [{"role": "user", "content": "Can you recommend a board game for four adults?"},
     {"role": "assistant", "content": "Ticket to Ride is easy to learn and plays well with four."},
     {"role": "user", "content": "We've played that. Something with more strategy?"}],
    [{"role": "user", "content": "how do I make a pivot table in excel"},
     {"role": "assistant", "content": "Select your data, go to Insert > PivotTable, choose where to put it, "
                                      "then drag fields into Rows, Columns and Values."},
     {"role": "user", "content": "ok and how do I show percentages instead of sums?"}],
    [{"role": "user", "content": "I'm going to Lisbon for a weekend in March."},
     {"role": "assistant", "content": "Nice choice. March is mild there, usually 15 to 18 degrees, with "
                                      "some rain."},
     {"role": "user", "content": "What neighbourhoods should I stay in?"},
     {"role": "assistant", "content": "Baixa and Chiado are central and walkable; Alfama is charming but "
                                      "hilly."},
     {"role": "user", "content": "Which one is quieter at night?"}],
    [{"role": "user", "content": "Explain recursion."},
     {"role": "assistant", "content": "Recursion is when a function calls itself on a smaller version of "
                                      "the same problem until it reaches a simple base case."},
     {"role": "user", "content": "Can you show it with factorial in Python?"}],
    [{"role": "system", "content": "You are a patient maths tutor. Give hints before answers."},
     {"role": "user", "content": "I don't get how to solve 3x + 7 = 22."}],
    [{"role": "system", "content": "You answer as a friendly librarian."},
     {"role": "user", "content": "I loved The Martian. What should I read next?"}],
    [{"role": "user", "content": "My code review comments keep upsetting a junior developer."},
     {"role": "assistant", "content": "Try separating must-fix issues from suggestions, and start with what "
                                      "works well in the change."},
     {"role": "user", "content": "Can you rewrite this comment that way: 'This is wrong, use a dict.'"}],
    [{"role": "user", "content": "What's the capital of Australia?"},
     {"role": "assistant", "content": "Canberra."},
     {"role": "user", "content": "Why not Sydney? It's bigger."}],
    [{"role": "user", "content": "I need a name for my bakery."},
     {"role": "assistant", "content": "Some ideas: Rise & Shine, The Crumb Corner, Golden Crust."},
     {"role": "user", "content": "It's in a small village by the sea and we mostly sell rye bread."}],
    [{"role": "user", "content": "Let's play twenty questions. I'm thinking of an animal."},
     {"role": "assistant", "content": "Great! Does it live in water?"},
     {"role": "user", "content": "No."}],
]

FOLLOW_UPS = ["", "", "Can you give an example?", "Make it shorter.", "Why?", "And what if that doesn't work?",
              "Could you put that in a table?", "Thanks. One more thing: what should I avoid?"]

OTHER_LANGUAGES = [
    "Quelle est la différence entre un prêt à taux fixe et à taux variable ?",
    "Comment expliquer la photosynthèse à un enfant de huit ans ?",
    "Peux-tu me proposer un menu de la semaine pour une famille de quatre personnes ?",
    "Wie funktioniert eigentlich eine Wärmepumpe?",
    "Kannst du mir drei Tipps geben, wie ich beim Einkaufen Geld spare?",
    "Was ist der Unterschied zwischen 'seit' und 'seid'?",
    "¿Por qué el cielo es azul?",
    "¿Qué debo hacer si mi perro come chocolate?",
    "Escribe un poema corto sobre el mar en invierno.",
    "Come si prepara un vero risotto alla milanese?",
    "Quali sono i vantaggi di andare al lavoro in bicicletta?",
    "Qual é a melhor forma de aprender inglês sozinho?",
    "Pode me explicar o que é inflação de um jeito simples?",
    "Hoe kan ik beter slapen als ik nachtdiensten werk?",
    "Wat is het verschil tussen een virus en een bacterie?",
    "Jak zacząć biegać, jeśli nigdy nie uprawiałem sportu?",
    "Почему зимой идёт снег, а не дождь?",
    "Как написать хорошее сопроводительное письмо?",
    "如何在家里种西红柿？",
    "请解释一下什么是区块链。",
    "日本で一番高い山は何ですか？",
    "簡単なカレーの作り方を教えてください。",
    "한국어를 빨리 배우는 방법이 있나요?",
    "Türkiye'de gezilecek en güzel yerler nerelerdir?",
    "Hur gör man kanelbullar?",
    "Mikä on paras tapa oppia uusi kieli aikuisena?",
]

PASSAGES = [
    ("meeting", "The planning group met on Tuesday to discuss the spring fair. Ticket sales opened last week and "
     "are ahead of last year's pace, with 340 sold so far. The main concern is parking: the school field "
     "that was used last year is being reseeded and cannot take cars. Tom offered to ask the garden centre "
     "about using its car park, and Priya will check whether the council can close Mill Lane for the day. "
     "The food stalls are nearly full, but there is still no one to run the tombola. The next meeting is on "
     "the 14th."),
    ("lighthouse", "The lighthouse on the headland was built in 1858 after three ships were lost on the rocks "
     "in a single winter. Its light was first fuelled by whale oil, then paraffin, and was electrified in "
     "1921. Keepers lived there with their families until 1987, when the light was automated. Today the "
     "keepers' cottages are a small museum, open from April to October, and the tower can be climbed on "
     "guided tours that run every hour. Dogs are welcome in the grounds but not in the tower."),
    ("battery", "Lithium-ion batteries age in two ways. Calendar ageing happens even when a battery is not "
     "used, and is fastest when it is kept hot and fully charged. Cycle ageing comes from charging and "
     "discharging; deep cycles from full to empty wear a battery faster than shallow ones. For a phone or "
     "laptop that stays plugged in, many manufacturers now stop charging at around 80 percent to slow "
     "calendar ageing. Cold weather does not damage the battery much, but it temporarily reduces the "
     "charge it can deliver."),
    ("policy", "Employees may work from home up to three days a week with their manager's agreement. Home "
     "working days must be recorded in the shared calendar by Friday of the previous week. Equipment such "
     "as a monitor or chair can be requested through the IT portal; the company pays for one set per "
     "employee. Expenses for internet or electricity are not reimbursed. Staff on probation work in the "
     "office full time for their first three months."),
    ("study", "Researchers asked 1,200 adults to keep a diary of their screen use for two weeks and then "
     "compared it with an app that tracked their actual use. On average people underestimated their phone "
     "time by about 40 minutes a day, and the heaviest users underestimated it the most. Estimates of "
     "computer use were much more accurate. The authors suggest that short, frequent phone checks are hard "
     "to remember, while computer sessions are longer and more deliberate."),
    ("story", "Mara found the key in the pocket of a coat she had bought at the flea market. It was small and "
     "brass, with a paper tag that read 'Room 6'. The next Saturday she went back and asked the seller "
     "where the coat had come from. He remembered: a hotel by the station had closed in the autumn and "
     "sold its lost property in one box. Mara walked to the station. The hotel was boarded up, but on the "
     "door a notice said the building would become a library in the new year."),
]

PASSAGE_TASKS = [
    "Summarise this in two sentences:\n\n{text}",
    "TL;DR:\n\n{text}",
    "Read this and list the key facts as bullet points.\n\n{text}",
    "{text}\n\nWhat is the main point of the text above?",
    "Give this text a short title and a one-line summary.\n\n{text}",
    "Write three quiz questions (with answers) about this passage:\n\n{text}",
    "Answer from the text only, and say if it doesn't say. {question}\n\nText:\n{text}",
    "{text}\n\n{question}",
]
PASSAGE_QUESTIONS = {
    "meeting": ["Who is checking about closing the road?", "How many tickets have been sold?",
                "What job still needs a volunteer?"],
    "lighthouse": ["When was the light automated?", "Can I bring my dog up the tower?",
                   "What fuel did the light use first?"],
    "battery": ["Does cold weather ruin the battery?", "Why do laptops stop charging at 80 percent?",
                "Which ages a battery faster, deep or shallow cycles?"],
    "policy": ["Can I claim my internet bill?", "I started last month. Can I work from home on Fridays?",
               "When do I have to record my home working days?"],
    "study": ["Who underestimated their phone time the most?", "Why were computer estimates more accurate?",
              "How many people took part?"],
    "story": ["What was written on the tag?", "Where did the coat come from?",
              "What will the hotel building become?"],
}

MATH = [
    ("A shop sells pens in packs of {a}. A teacher needs {b} pens for her class. How many packs must she buy, "
     "and how many pens will be left over?", lambda r: {"a": r.randint(3, 12), "b": r.randint(20, 90)}),
    ("A car uses {a} litres of fuel per 100 km. Fuel costs {b} euros per litre. What does a {c} km trip cost?",
     lambda r: {"a": r.choice([4.5, 5.2, 6, 6.8, 7.5]), "b": r.choice([1.65, 1.79, 1.9]),
                "c": r.choice([120, 250, 430, 610])}),
    ("{a} workers can build a wall in {b} days. How long would {c} workers take, working at the same rate?",
     lambda r: {"a": r.randint(2, 6), "b": r.randint(4, 15), "c": r.randint(3, 10)}),
    ("A tank holds {a} litres. A tap fills it at {b} litres per minute while a leak loses {c} litres per "
     "minute. How long until it is full?", lambda r: {"a": r.choice([300, 480, 600, 900]),
                                                      "b": r.randint(12, 30), "c": r.randint(1, 8)}),
    ("The price of a bike went up by {a}% and then down by {a}%. It now costs {b} dollars. What did it cost "
     "at first?", lambda r: {"a": r.choice([10, 20, 25]), "b": r.choice([396, 480, 540, 720])}),
    ("In a class of {a} students, {b} play football, {c} play chess and {d} play both. How many play neither?",
     lambda r: (lambda a, b, c: {"a": a, "b": b, "c": c, "d": r.randint(1, min(b, c))})(
         r.randint(25, 35), r.randint(8, 15), r.randint(5, 12))),
    ("What is {a}% of {b}? Then what is {b} increased by {a}%?",
     lambda r: {"a": r.choice([5, 12, 15, 17.5, 30]), "b": r.randint(40, 900)}),
    ("A rectangle has a perimeter of {a} cm and its length is {b} cm more than its width. Find its area.",
     lambda r: (lambda w, d: {"a": 2 * (2 * w + d), "b": d})(r.randint(3, 20), r.randint(1, 9))),
    ("Solve for x: {a}x - {b} = {c}x + {d}", lambda r: {"a": r.randint(4, 9), "b": r.randint(1, 20),
                                                     "c": r.randint(1, 3), "d": r.randint(1, 30)}),
    ("I walk at {a} km/h and my friend cycles at {b} km/h. She leaves {c} minutes after me from the same "
     "place. When does she catch up?", lambda r: {"a": r.choice([4, 5, 6]), "b": r.choice([15, 18, 20]),
                                                  "c": r.choice([10, 20, 30, 45])}),
    ("A bag has {a} red, {b} blue and {c} green marbles. If I take two without looking, what is the chance "
     "both are red?", lambda r: {"a": r.randint(2, 8), "b": r.randint(2, 8), "c": r.randint(1, 6)}),
]
MATH_STYLES = ["", " Show your working.", " Just the answer please.", " Explain each step for a beginner."]

CODE = [
    ("python", "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)"),
    ("python", "with open('log.txt') as f:\n    errors = [line for line in f if 'ERROR' in line]\nprint(len(errors))"),
    ("python", "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)"),
    ("javascript", "const total = items.reduce((sum, item) => sum + item.price * item.qty, 0);"),
    ("javascript", "for (var i = 0; i < 3; i++) {\n  setTimeout(() => console.log(i), 100);\n}"),
    ("typescript", "function first<T>(xs: T[]): T | undefined {\n  return xs.length ? xs[0] : undefined;\n}"),
    ("c", "int sum(int *a, int n) {\n    int s = 0;\n    for (int i = 0; i <= n; i++) s += a[i];\n    return s;\n}"),
    ("java", "public static boolean isPalindrome(String s) {\n    return new StringBuilder(s).reverse().toString()"
     ".equals(s);\n}"),
    ("go", "func Max(xs []int) int {\n\tm := xs[0]\n\tfor _, x := range xs {\n\t\tif x > m {\n\t\t\tm = x\n"
     "\t\t}\n\t}\n\treturn m\n}"),
    ("rust", "fn main() {\n    let v = vec![1, 2, 3];\n    let w = v;\n    println!(\"{:?}\", v);\n}"),
    ("sql", "SELECT department, AVG(salary)\nFROM employees\nWHERE hired > '2020-01-01'\nGROUP BY department;"),
    ("bash", "for f in *.txt; do\n  wc -l \"$f\"\ndone | sort -n | tail -3"),
    ("ruby", "words.group_by(&:length).transform_values(&:count)"),
    ("php", "$names = array_map(fn($u) => strtoupper($u['name']), $users);"),
]
CODE_TASKS = ["Explain what this {lang} code does:\n\n```{lang}\n{code}\n```",
              "Is there a bug in this {lang} code? If so, fix it.\n\n```{lang}\n{code}\n```",
              "Add comments to this {lang} code.\n\n```{lang}\n{code}\n```",
              "Rewrite this {lang} code in {other}.\n\n```{lang}\n{code}\n```",
              "How would I test this {lang} function?\n\n```{lang}\n{code}\n```",
              "```{lang}\n{code}\n```\nwhat's wrong with this"]
CODE_WRITE = [
    "Write a Python function that checks whether a string is a valid IPv4 address.",
    "In JavaScript, how do I remove duplicates from an array of objects by their id?",
    "Write a C function that reverses a linked list.",
    "Show me how to read a JSON file in Go and print one field.",
    "Write a SQL query that finds the second highest salary in a table employees(name, salary).",
    "Write a bash script that backs up a folder to a dated tar.gz file.",
    "How do I make an HTTP GET request in Python without extra libraries?",
    "Write a Java class for a simple bank account with deposit and withdraw methods.",
    "In Rust, write a function that returns the largest word in a sentence.",
    "Write a Python generator that yields the lines of a file in reverse order.",
    "Write a CSS rule that centres a div horizontally and vertically.",
    "How do I sort a list of dictionaries by two keys in Python?",
]
LANGUAGES = ["Python", "JavaScript", "Go", "Rust", "Java", "C#", "Kotlin"]

SENTENCES = [
    "we regret to inform you that the event has been postponed due to unforeseen circumstances",
    "The meeting went on for too long and nobody agreed on anything useful.",
    "I can't come to work today because my car broke down on the motorway.",
    "our new app helps you track your spending and save money every month",
    "The results of the survey indicate that a majority of respondents prefer flexible hours.",
    "hey can u send me the file again i lost it sorry",
    "The museum will be closed on Monday for maintenance work on the heating system.",
    "Thank you for your patience while we look into the problem with your order.",
    "Please remember to bring a packed lunch and waterproof clothes for the school trip.",
    "The government announced new rules for electric scooters in city centres.",
]
REWRITE_TASKS = ["Make this sound more formal: {s}", "Make this friendlier: \"{s}\"", "Shorten this: {s}",
                 "Fix any mistakes and rewrite it clearly: {s}", "Rewrite this for a child: {s}",
                 "Give me three different ways to say this: {s}", "Turn this into a tweet: {s}"]
TRANSLATE_TASKS = ["Translate into {lang}: {s}", "How do you say this in {lang}? \"{s}\"",
                   "Translate to {lang} and keep the tone: {s}", "{lang} translation please: {s}"]
TARGET_LANGUAGES = ["French", "German", "Spanish", "Italian", "Portuguese", "Dutch", "Japanese", "Chinese",
                    "Polish", "Turkish"]
FOREIGN_SENTENCES = [
    "Le train de 8 h 15 est supprimé en raison d'une grève.",
    "Wir suchen eine Wohnung mit Balkon in der Nähe des Bahnhofs.",
    "El restaurante cierra los lunes, pero abre todos los demás días.",
    "Il corso di yoga inizia alle sette e dura un'ora.",
    "明天会下雨，记得带伞。",
    "この電車は次の駅で止まりません。",
]

# Small programs people ask for, put to a language and phrased in one of several ways (code-request).
PROGRAM_TASKS = [
    "counts how many times each word appears in a text", "checks whether a string is a valid email address",
    "reads a CSV file and prints the average of one column", "removes duplicates from a list but keeps the order",
    "converts a temperature from Celsius to Fahrenheit", "finds the second largest number in an array",
    "merges two sorted lists into one sorted list", "returns the n-th prime number",
    "flattens a nested list", "checks if two strings are anagrams", "parses a date like 2024-03-15 and prints "
    "the weekday", "retries a network call up to three times with a delay", "validates a password (8+ characters, "
    "a digit, an upper-case letter)", "splits a list into chunks of size n", "computes the factorial of a number "
    "without recursion", "reverses the words in a sentence", "groups a list of people by their city",
    "returns the most common element of a list", "reads a JSON file and pretty-prints it",
    "implements binary search", "implements a simple stack with push, pop and peek", "counts the vowels in a "
    "string", "rounds a price to two decimals and formats it with a currency sign", "generates a random password",
    "checks whether a year is a leap year", "converts a Roman numeral to an integer", "finds all files with a given "
    "extension in a folder", "computes the distance between two GPS coordinates", "caches the results of a slow "
    "function", "sorts a list of tuples by the second element", "turns a string into a URL slug",
    "checks if a number is a palindrome", "transposes a matrix", "counts the lines in a file",
    "implements FizzBuzz up to 100", "computes a running average", "finds the longest common prefix of some strings",
    "downloads a web page and counts the links in it", "implements a queue with two stacks",
    "parses command-line arguments for an input file and a --verbose flag",
]
PROGRAM_LANGUAGES = ["Python", "Python", "JavaScript", "TypeScript", "Go", "Rust", "Java", "C", "C++", "C#",
                     "Ruby", "PHP", "Kotlin", "Swift", "Bash"]
PROGRAM_ASKS = ["Write a {lang} function that {task}.", "how do i write something in {lang} that {task}",
                "Can you show me {lang} code that {task}?",
                "I need a {lang} script that {task}. Please explain it too.",
                "{lang}: a function that {task}, with a short test.", "Give me the simplest {lang} code that {task}.",
                "write {lang} that {task}, no libraries"]

KINDS = ["question", "conversation", "language", "passage", "math", "code", "rewrite", "translate", "code-request"]


def _user(text: str) -> Messages:
    return [{"role": "user", "content": text}]


def _question(r: random.Random) -> Messages:
    text = r.choice(QUESTIONS)
    if r.random() < 0.25:
        text = text.lower()
    return _user((r.choice(OPENERS) + text + r.choice(CLOSERS)).strip())


def _conversation(r: random.Random) -> Messages:
    messages = [dict(m) for m in r.choice(CONVERSATIONS)]
    follow = r.choice(FOLLOW_UPS)
    if follow:
        messages[-1]["content"] += " " + follow
    return messages


def _language(r: random.Random) -> Messages:
    return _user(r.choice(OTHER_LANGUAGES))


def _passage(r: random.Random) -> Messages:
    name, text = r.choice(PASSAGES)
    return _user(r.choice(PASSAGE_TASKS).format(text=text, question=r.choice(PASSAGE_QUESTIONS[name])))


def _math(r: random.Random) -> Messages:
    frame, numbers = r.choice(MATH)
    return _user(frame.format(**numbers(r)) + r.choice(MATH_STYLES))


def _code(r: random.Random) -> Messages:
    if r.random() < 0.35:
        return _user(r.choice(CODE_WRITE))
    lang, code = r.choice(CODE)
    other = r.choice([x for x in LANGUAGES if x.lower() != lang])
    return _user(r.choice(CODE_TASKS).format(lang=lang, code=code, other=other))


def _rewrite(r: random.Random) -> Messages:
    return _user(r.choice(REWRITE_TASKS).format(s=r.choice(SENTENCES)))


def _translate(r: random.Random) -> Messages:
    if r.random() < 0.3:
        return _user(f"What does this mean in English? {r.choice(FOREIGN_SENTENCES)}")
    return _user(r.choice(TRANSLATE_TASKS).format(lang=r.choice(TARGET_LANGUAGES), s=r.choice(SENTENCES)))


def _code_request(r: random.Random) -> Messages:
    ask = r.choice(PROGRAM_ASKS).format(lang=r.choice(PROGRAM_LANGUAGES), task=r.choice(PROGRAM_TASKS))
    return _user(ask[0].upper() + ask[1:] if r.random() < 0.7 else ask)


MAKERS = {"question": _question, "conversation": _conversation, "language": _language, "passage": _passage,
          "math": _math, "code": _code, "rewrite": _rewrite, "translate": _translate,
          "code-request": _code_request}


def distinct_stream(makers: dict, r: random.Random, prefix: str = "") -> Iterator[dict]:
    """Prompts from `makers` (kind -> maker of Messages from r, or None when it has nothing to make), the kinds
    taken in turn, each prompt once, as {"kind": prefix + kind, "messages"}. Gives up (stops) when 2,000 draws
    in a row bring no new prompt."""
    seen: set[str] = set()
    misses = 0
    while misses < 2000:
        for kind, make in makers.items():
            messages = make(r)
            key = repr(messages)
            if messages is None or key in seen:
                misses += 1
                continue
            misses = 0
            seen.add(key)
            yield {"kind": prefix + kind, "messages": messages}


def corpus_prompts(seed: int = 0) -> Iterator[dict]:
    """An endless, seeded stream of distinct prompts, the kinds taken in turn (see the module docstring)."""
    return distinct_stream({kind: MAKERS[kind] for kind in KINDS}, random.Random(seed))
