#!/usr/bin/python3
"""Writes instructions.jsonl and eval.jsonl: small templated question/answer pairs in the
{"prompt", "completion"} format (the loss is on the answer only). Deterministic; the files are
committed, this script documents how they were made."""
import json
import random

rng = random.Random(7)
ANIMALS = {"cat": 4, "dog": 4, "horse": 4, "bird": 2, "duck": 2, "hen": 2, "spider": 8, "ant": 6, "bee": 6,
           "fish": 0, "snake": 0, "cow": 4, "goose": 2, "crab": 10, "fox": 4, "owl": 2}
WORDS = {0: "no", 2: "two", 4: "four", 6: "six", 8: "eight", 10: "ten"}
COLOURS = {"the sky": "blue", "grass": "green", "snow": "white", "coal": "black", "blood": "red", "the sun": "yellow",
           "a rose": "red", "milk": "white", "an orange": "orange", "the sea": "blue", "a crow": "black",
           "a lemon": "yellow", "a leaf": "green", "chalk": "white", "a plum": "purple"}
NAMES = ["Romeo", "Juliet", "Hamlet", "Ophelia", "Lear", "Cordelia", "Macbeth", "Banquo", "Portia", "Brutus",
         "Othello", "Iago", "Viola", "Orsino", "Prospero", "Miranda", "Puck", "Titania", "Falstaff", "Hal"]
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]

pairs = []
for animal, legs in ANIMALS.items():
    pairs.append((f"How many legs does a {animal} have?", f"A {animal} has {WORDS[legs]} legs."))
for thing, colour in COLOURS.items():
    pairs.append((f"What colour is {thing}?", f"{thing[0].upper() + thing[1:]} is {colour}."))
for name in NAMES:
    pairs.append((f"Greet {name}.", f"Good morrow, {name}! Well met."))
for a in range(1, 7):
    for b in range(1, 7):
        pairs.append((f"What is {NUMBERS[a]} plus {NUMBERS[b]}?", f"{NUMBERS[a].capitalize()} plus {NUMBERS[b]} is {NUMBERS[a + b]}."))
rng.shuffle(pairs)
held = pairs[:12]
train = pairs[12:]


def write(path, rows):
    with open(path, "w") as f:
        for q, a in rows:
            f.write(json.dumps({"prompt": f"### Question: {q}\n### Answer:", "completion": f" {a}\n"}) + "\n")


write("instructions.jsonl", train)
write("eval.jsonl", held)
print(len(train), "training pairs,", len(held), "held out")
