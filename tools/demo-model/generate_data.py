"""Deterministic synthetic chat data for the mlaserve demo model (plain Python stdlib).

Each sample is one assistant turn to learn: the conversation before it ("messages", "tools",
"enable_thinking"), rendered with chat_template.jinja and add_generation_prompt=True, and the
text the model must produce ("target", ending in the stop token <|user|> after an answer or
<|observation|> after a tool call).

    python3 generate_data.py --seed 0 --n 100000 OUT.jsonl      # training split
    python3 generate_data.py --seed 1 --n 2000 OUT.jsonl        # held-out split (other seed)
"""
import argparse
import json
import random

CAPITALS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo",
    "China": "Beijing", "India": "New Delhi", "Brazil": "Brasilia", "Canada": "Ottawa",
    "Australia": "Canberra", "Egypt": "Cairo", "Kenya": "Nairobi", "Mexico": "Mexico City",
    "Russia": "Moscow", "Norway": "Oslo", "Sweden": "Stockholm", "Poland": "Warsaw",
    "Greece": "Athens", "Portugal": "Lisbon", "Peru": "Lima", "Chile": "Santiago",
    "Argentina": "Buenos Aires", "Turkey": "Ankara", "Ireland": "Dublin", "Austria": "Vienna",
    "Finland": "Helsinki", "Thailand": "Bangkok", "Vietnam": "Hanoi", "Korea": "Seoul",
    "Cuba": "Havana",
}
UNITS = [  # (question unit phrase, answer)
    ("centimeters in a meter", "There are 100 centimeters in a meter."),
    ("meters in a kilometer", "There are 1000 meters in a kilometer."),
    ("grams in a kilogram", "There are 1000 grams in a kilogram."),
    ("seconds in a minute", "There are 60 seconds in a minute."),
    ("minutes in an hour", "There are 60 minutes in an hour."),
    ("hours in a day", "There are 24 hours in a day."),
    ("days in a week", "There are 7 days in a week."),
    ("months in a year", "There are 12 months in a year."),
    ("millimeters in a centimeter", "There are 10 millimeters in a centimeter."),
    ("milliliters in a liter", "There are 1000 milliliters in a liter."),
    ("inches in a foot", "There are 12 inches in a foot."),
    ("feet in a yard", "There are 3 feet in a yard."),
]
CITIES = {  # city -> (time zone, temperature C, condition, local time)
    "Paris": "Europe/Paris", "Berlin": "Europe/Berlin", "London": "Europe/London",
    "Tokyo": "Asia/Tokyo", "New York": "America/New_York", "Sydney": "Australia/Sydney",
    "Madrid": "Europe/Madrid", "Rome": "Europe/Rome", "Cairo": "Africa/Cairo",
    "Moscow": "Europe/Moscow", "Beijing": "Asia/Shanghai", "Seoul": "Asia/Seoul",
    "Chicago": "America/Chicago", "Toronto": "America/Toronto", "Lima": "America/Lima",
    "Oslo": "Europe/Oslo", "Dublin": "Europe/Dublin", "Bangkok": "Asia/Bangkok",
    "Nairobi": "Africa/Nairobi", "Denver": "America/Denver",
}
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy"]
CONVERSIONS = {  # (from, to) -> factor
    ("km", "miles"): 0.621371, ("miles", "km"): 1.609344, ("kg", "pounds"): 2.204623,
    ("pounds", "kg"): 0.453592, ("meters", "feet"): 3.28084, ("feet", "meters"): 0.3048,
    ("liters", "gallons"): 0.264172, ("celsius", "fahrenheit"): None,
}
WORDS = ("red blue green cat dog bird sun moon star tree river stone cloud apple bread milk "
         "happy quick slow small big cold warm light dark book door road ship song fish").split()
LETTERS = "abcdefghijklmnopqrstuvwxyz"

TOOLS = {
    "get_weather": {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
    "convert_units": {"type": "function", "function": {
        "name": "convert_units", "description": "Convert a value between units",
        "parameters": {"type": "object", "properties": {
            "value": {"type": "number"}, "from_unit": {"type": "string"},
            "to_unit": {"type": "string"}}, "required": ["value", "from_unit", "to_unit"]}}},
    "get_time": {"type": "function", "function": {
        "name": "get_time", "description": "Get the local time in a time zone",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}},
                       "required": ["timezone"]}}},
}

GREETINGS = [("Hello!", "Hello! How can I help you today?"), ("Hi", "Hi! How can I help you today?"),
             ("Hey there", "Hey! How can I help you today?"),
             ("Good morning", "Good morning! How can I help you today?"),
             ("How are you?", "I am doing well, thank you! How can I help you?"),
             ("Who are you?", "I am a tiny demo assistant served by mlaserve."),
             ("Thanks!", "You are welcome!"), ("Thank you", "You are welcome!"),
             ("Bye", "Goodbye! Have a nice day."), ("Goodbye", "Goodbye! Have a nice day.")]


def fmt_num(x):
    s = f"{x:.2f}".rstrip("0").rstrip(".")
    return s if s != "-0" else "0"


def answer_sample(rng, q, ans, reasoning, tools, system):
    return {"q": q, "ans": ans, "reasoning": reasoning, "tools": tools, "system": system}


def make_arith(rng):
    op = rng.choice("+-*")
    if op == "*":
        a, b = rng.randint(0, 12), rng.randint(0, 12)
        r, sym, word = a * b, "*", "times"
    elif op == "+":
        a, b = rng.randint(0, 50), rng.randint(0, 50)
        r, sym, word = a + b, "+", "plus"
    else:
        a = rng.randint(0, 50)
        b = rng.randint(0, a)
        r, sym, word = a - b, "-", "minus"
    q = rng.choice([f"What is {a} {sym} {b}?", f"What is {a} {word} {b}?", f"Compute {a} {sym} {b}.",
                    f"{a} {sym} {b} = ?"])
    return q, f"{a} {sym} {b} = {r}.", f"{a} {sym} {b} = {r}."


def make_fact(rng):
    if rng.random() < 0.7:
        c = rng.choice(sorted(CAPITALS))
        q = rng.choice([f"What is the capital of {c}?", f"Capital of {c}?",
                        f"Which city is the capital of {c}?"])
        a = f"The capital of {c} is {CAPITALS[c]}."
        return q, a, f"The capital of {c} is {CAPITALS[c]}."
    u, a = rng.choice(UNITS)
    q = rng.choice([f"How many {u}?", f"How many {u} are there?"])
    return q, a, a


def make_string(rng):
    if rng.random() < 0.5:
        ws = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
        q = rng.choice([f"Repeat after me: {ws}", f"Copy this: {ws}", f"Say exactly: {ws}"])
        return q, ws, f"I repeat: {ws}"
    ls = [rng.choice(LETTERS) for _ in range(rng.randint(2, 6))]
    q = rng.choice([f"Reverse the letters: {' '.join(ls)}", f"Reverse: {' '.join(ls)}"])
    r = " ".join(reversed(ls))
    return q, r, f"Reversed: {r}"


def tool_question(rng):
    kind = rng.choice(["get_weather", "convert_units", "get_time"])
    if kind == "get_weather":
        city = rng.choice(sorted(CITIES))
        q = rng.choice([f"What's the weather in {city}?", f"How is the weather in {city} today?",
                        f"Weather in {city}?"])
        args = {"city": city}
        t, cond = rng.randint(-10, 35), rng.choice(CONDITIONS)
        resp = json.dumps({"city": city, "temperature_c": t, "condition": cond})
        final = f"It is {t}°C and {cond} in {city}."
        why = f"The user wants the weather in {city}. I will call get_weather."
    elif kind == "convert_units":
        (fu, tu), f = rng.choice(sorted(CONVERSIONS.items(), key=lambda kv: kv[0]))
        v = rng.randint(1, 100)
        q = rng.choice([f"Convert {v} {fu} to {tu}.", f"How much is {v} {fu} in {tu}?"])
        args = {"value": v, "from_unit": fu, "to_unit": tu}
        r = v * 9 / 5 + 32 if f is None else v * f
        rs = fmt_num(r)
        resp = json.dumps({"result": float(rs) if "." in rs else int(rs), "unit": tu})
        final = f"{v} {fu} is {rs} {tu}."
        why = f"The user wants {v} {fu} in {tu}. I will call convert_units."
    else:
        city = rng.choice(sorted(CITIES))
        q = rng.choice([f"What time is it in {city}?", f"Current time in {city}?"])
        args = {"timezone": CITIES[city]}
        hm = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
        resp = json.dumps({"timezone": CITIES[city], "time": hm})
        final = f"It is {hm} in {city}."
        why = f"The user wants the time in {city}, time zone {CITIES[city]}. I will call get_time."
    return kind, q, args, resp, final, why


def tool_list(rng, needed=None):
    names = sorted(TOOLS)
    k = rng.randint(1, 3)
    chosen = rng.sample(names, k)
    if needed and needed not in chosen:
        chosen[0] = needed
    rng.shuffle(chosen)
    return [TOOLS[n] for n in chosen]


def target(reasoning, body, stop, thinking):
    return (reasoning + "</think>" if thinking else "") + body + stop


def tool_call_text(name, args):
    s = "<tool_call>" + name
    for k, v in args.items():
        s += f"<arg_key>{k}</arg_key><arg_value>{v if isinstance(v, str) else json.dumps(v)}</arg_value>"
    return s + "</tool_call>"


def make_sample(rng, idx):
    thinking = rng.random() < 0.5
    system = [{"role": "system", "content": "You are a helpful assistant."}] if rng.random() < 0.2 else []
    history = []
    if rng.random() < 0.15:  # an earlier exchange in the same chat
        q0, a0, _ = make_arith(rng) if rng.random() < 0.5 else make_fact(rng)
        history = [{"role": "user", "content": q0}, {"role": "assistant", "content": a0}]
    r = rng.random()
    if r < 0.40:
        kind, q, args, resp, final, why = tool_question(rng)
        tools = tool_list(rng, kind)
        msgs = system + history + [{"role": "user", "content": q}]
        call = {"type": "function", "function": {"name": kind, "arguments": args}}
        if rng.random() < 0.5:
            return {"category": "tool_call", "tools": tools, "messages": msgs, "enable_thinking": thinking,
                    "target": target(why, tool_call_text(kind, args), "<|observation|>", thinking)}
        msgs = msgs + [{"role": "assistant", "content": "", "tool_calls": [call]},
                       {"role": "tool", "content": resp}]
        return {"category": "tool_answer", "tools": tools, "messages": msgs, "enable_thinking": thinking,
                "target": target("The tool returned the answer.", final, "<|user|>", thinking)}
    if r < 0.55:
        cat, (q, a, why) = "arithmetic", make_arith(rng)
    elif r < 0.70:
        cat, (q, a, why) = "fact", make_fact(rng)
    elif r < 0.85:
        cat, (q, a, why) = "string", make_string(rng)
    else:
        cat = "greeting"
        q, a = rng.choice(GREETINGS)
        why = "The user greets me."
    tools = tool_list(rng) if rng.random() < 0.25 else None
    msgs = system + history + [{"role": "user", "content": q}]
    return {"category": cat, "tools": tools, "messages": msgs, "enable_thinking": thinking,
            "target": target(why, a, "<|user|>", thinking)}


def generate(seed, n):
    rng = random.Random(seed)
    return [dict(id=f"s{seed}-{i}", **make_sample(rng, i)) for i in range(n)]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("out")
    a = ap.parse_args()
    with open(a.out, "w", encoding="utf-8") as f:
        for s in generate(a.seed, a.n):
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
